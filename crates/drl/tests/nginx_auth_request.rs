//! A real reverse proxy: Debian's nginx in front of a small upstream, with
//! `auth_request` to `drl serve`'s forward-auth endpoint. Requests beyond
//! the limit get 429 through nginx. Needs the `nginx` package.

mod common;

use std::process::{Child, Command, Stdio};

use common::{Drl, free_port, header, http_request, wait_for};

const CONFIG: &str = r#"
limits:
  - name: edge
    algorithm: gcra
    quota: 2/h
    key:
      headers: [x-tenant]
"#;

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx_conf(dir: &std::path::Path, drl: std::net::SocketAddr, front: u16, up: u16) -> String {
    let d = dir.display();
    format!(
        r#"
daemon off;
master_process off;
worker_processes 1;
error_log {d}/error.log info;
pid {d}/nginx.pid;
events {{ worker_connections 128; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;

  # The upstream application.
  server {{
    listen 127.0.0.1:{up};
    location / {{ return 200 "upstream ok\n"; }}
  }}

  # The edge: every request is first asked of drl.
  server {{
    listen 127.0.0.1:{front};
    location / {{
      auth_request /_drl;
      auth_request_set $drl_ratelimit $upstream_http_ratelimit;
      auth_request_set $drl_policy $upstream_http_ratelimit_policy;
      auth_request_set $drl_retry $upstream_http_retry_after;
      add_header RateLimit $drl_ratelimit always;
      add_header RateLimit-Policy $drl_policy always;
      error_page 403 = @ratelimited;
      proxy_pass http://127.0.0.1:{up};
    }}
    # auth_request passes only 2xx, 401 and 403 through, so drl answers
    # 403 here and nginx turns it into a 429.
    location = /_drl {{
      internal;
      proxy_pass http://{drl}/v1/auth/edge?deny_status=403;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
    }}
    location @ratelimited {{
      add_header Retry-After $drl_retry always;
      add_header RateLimit $drl_ratelimit always;
      default_type application/problem+json;
      return 429 '{{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}}';
    }}
  }}
}}
"#
    )
}

fn start_nginx(drl: &Drl) -> (Nginx, u16) {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("nginx is not installed: apt-get install -y nginx");
    // Free ports can be taken between probe and bind: retry a few times.
    for _ in 0..5 {
        let (front, up) = (free_port(), free_port());
        let dir = drl.dir.path();
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(dir, drl.http, front, up)).unwrap();
        let mut child = Command::new(nginx)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let url = format!("http://127.0.0.1:{up}/");
        let mut started = false;
        wait_for("nginx to listen or exit", || {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            started = http_request("GET", &url, &[], b"").is_some_and(|r| r.0 == 200);
            started
        });
        if started {
            return (Nginx(child), front);
        }
        let _ = child.wait();
    }
    panic!("nginx did not start");
}

#[test]
fn nginx_auth_request_enforces_the_limit() {
    let drl = Drl::start(CONFIG);
    let (_nginx, front) = start_nginx(&drl);
    let url = format!("http://127.0.0.1:{front}/app");
    let get = |tenant: &str| http_request("GET", &url, &[("x-tenant", tenant)], b"").unwrap();

    for remaining in [1, 0] {
        let (s, h, body) = get("acme");
        assert_eq!(s, 200, "{body}");
        assert_eq!(body, "upstream ok\n");
        let rl = header(&h, "ratelimit").expect("RateLimit header through nginx");
        assert!(rl.starts_with(&format!("\"edge\";r={remaining};")), "{rl}");
        assert_eq!(header(&h, "ratelimit-policy"), Some("\"edge\";q=2;w=3600"));
    }
    for _ in 0..3 {
        let (s, h, body) = get("acme");
        assert_eq!(s, 429, "{body}");
        assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
        assert!(body.contains("Too Many Requests"), "{body}");
        assert!(!body.contains("upstream ok"));
        let retry: u64 = header(&h, "retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!(retry >= 1, "{retry}");
    }
    // Another tenant still gets through.
    let (s, _, body) = get("globex");
    assert_eq!(s, 200);
    assert_eq!(body, "upstream ok\n");
}
