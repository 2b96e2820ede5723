//! Compiles the native gRPC API with protox (no protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/drl/v1/ratelimit.proto");
    let fds = protox::compile(["drl/v1/ratelimit.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
