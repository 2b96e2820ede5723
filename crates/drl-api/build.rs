//! Compiles the native gRPC API and limitador's Kuadrant API with protox
//! (no protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["drl/v1/ratelimit.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    // The Kuadrant service carries Envoy RLS v3 messages: those are
    // envoy-types' own (`names.proto` only names them).
    let fds = protox::compile(
        ["kuadrant/service/ratelimit/v1/kuadrantrls.proto"],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .extern_path(
            ".envoy.service.ratelimit.v3",
            "::envoy_types::pb::envoy::service::ratelimit::v3",
        )
        .compile_fds(fds)?;
    Ok(())
}
