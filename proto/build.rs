//! Generates the Rust code for the Chorus contract into OUT_DIR.
//!
//! The .proto files are parsed by protox (pure Rust), so no system protoc is needed.
//! Client and server code are both generated; the crate's features decide which of
//! them is compiled.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "chorus/sandbox/v1/sandbox.proto",
    "chorus/serving/v1/serving.proto",
    "chorus/tools/v1/tools.proto",
    "chorus/orchestrator/v1/orchestrator.proto",
    "lf/a2a/v1/a2a.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = protox::compile(PROTOS, ["."])?;
    let descriptor_path = out.join("chorus_descriptor.bin");
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&descriptors),
    )?;

    tonic_prost_build::configure()
        .client_mod_attribute(".", r#"#[cfg(feature = "client")]"#)
        .server_mod_attribute(".", r#"#[cfg(feature = "server")]"#)
        .compile_fds(descriptors)?;

    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
