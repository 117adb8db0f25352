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
    let encoded = prost::Message::encode_to_vec(&descriptors);
    std::fs::write(&descriptor_path, &encoded)?;
    tonic_prost_build::configure()
        .client_mod_attribute(".", r#"#[cfg(feature = "client")]"#)
        .server_mod_attribute(".", r#"#[cfg(feature = "server")]"#)
        // The well-known types with serde's proto3 JSON, for the generated
        // JSON of the A2A types below.
        .compile_well_known_types(true)
        // The well-known types with serde's proto3 JSON (src/wkt.rs).
        .extern_path(".google.protobuf", "crate::wkt")
        .compile_fds(descriptors)?;
    // proto3 JSON (serde) of the A2A types: how the A2A face's HTTP bindings
    // write a stream's events.
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .extern_path(".google.protobuf", "crate::wkt")
        .out_dir(&out)
        .build(&[".lf.a2a.v1"])?;

    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
