//! Compiles drl's native gRPC API (the server's own .proto) with protox
//! (no protoc needed): the client stubs only.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../drl-server/proto/drl/v1/ratelimit.proto");
    let fds = protox::compile(["drl/v1/ratelimit.proto"], ["../drl-server/proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
