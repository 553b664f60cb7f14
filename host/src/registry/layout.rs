//! The CNCF Wasm OCI artifact layout: one `application/wasm` layer, and a config
//! (`application/vnd.wasm.config.v0+json`) naming the component's world by its imports
//! and exports, as `wkg` and `spin registry` write and read it.

use serde::{Deserialize, Serialize};

use super::store::digest_of;
use crate::error::Error;

pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

/// An OCI image manifest, as far as a component artifact uses it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// The config blob.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComponentInfo {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    #[serde(default)]
    pub target: Option<String>,
}

/// What a push sends: the config and manifest bytes, with the layer's descriptor.
pub struct Packed {
    pub config: Vec<u8>,
    pub config_digest: String,
    pub layer: Descriptor,
    pub manifest: Vec<u8>,
}

/// Packs a component whose interfaces are `info`.
pub fn pack(wasm: &[u8], info: ComponentInfo) -> Result<Packed, Error> {
    let layer = Descriptor {
        media_type: LAYER_MEDIA_TYPE.into(),
        digest: digest_of(wasm),
        size: wasm.len() as u64,
    };
    let config = WasmConfig {
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        author: None,
        architecture: "wasm".into(),
        os: "wasip2".into(),
        layer_digests: vec![layer.digest.clone()],
        component: Some(info),
    };
    let config = to_json(&config)?;
    let config_digest = digest_of(&config);
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(super::client::OCI_MANIFEST.into()),
        artifact_type: Some(CONFIG_MEDIA_TYPE.into()),
        config: Descriptor {
            media_type: CONFIG_MEDIA_TYPE.into(),
            digest: config_digest.clone(),
            size: config.len() as u64,
        },
        layers: vec![layer.clone()],
    };
    Ok(Packed {
        manifest: to_json(&manifest)?,
        config,
        config_digest,
        layer,
    })
}

/// The one wasm layer of a pulled manifest, or why the artifact is not a component.
pub fn wasm_layer(bytes: &[u8], shown: &str) -> Result<Descriptor, Error> {
    let not = |why: &str| {
        Error::new(
            "E-REG-008",
            format!("{shown} is not a Wasm component artifact: {why}"),
        )
        .hint("push components with `mur push X.wasm REF` (or wkg / spin registry push)")
    };
    let manifest: Manifest = serde_json::from_slice(bytes)
        .map_err(|_| not("its manifest is not an OCI image manifest"))?;
    if manifest.schema_version != 2 {
        return Err(not("its manifest's schemaVersion is not 2"));
    }
    let mut wasm = manifest
        .layers
        .into_iter()
        .filter(|l| l.media_type == LAYER_MEDIA_TYPE);
    let (Some(layer), None) = (wasm.next(), wasm.next()) else {
        return Err(not("it does not hold exactly one application/wasm layer"));
    };
    if !super::reference::is_digest(&layer.digest) {
        return Err(not("its layer's digest is not sha256:<64 hex digits>"));
    }
    Ok(layer)
}

/// Every interface a component imports and exports, by its full name.
pub fn interfaces(wasm: &[u8]) -> Option<ComponentInfo> {
    let wit_component::DecodedWasm::Component(resolve, world) = wit_component::decode(wasm).ok()?
    else {
        return None;
    };
    let world = &resolve.worlds[world];
    let names = |keys: &mut dyn Iterator<Item = &wit_parser::WorldKey>| -> Vec<String> {
        keys.filter_map(|key| match key {
            wit_parser::WorldKey::Interface(id) => resolve.id_of(*id),
            wit_parser::WorldKey::Name(name) => Some(name.clone()),
        })
        .collect()
    };
    Some(ComponentInfo {
        exports: names(&mut world.exports.keys()),
        imports: names(&mut world.imports.keys()),
        target: None,
    })
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value)
        .map_err(|e| Error::new("E-REG-001", format!("could not write an OCI document: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_component_reads_back_as_its_layer() {
        let info = ComponentInfo {
            exports: vec!["murmur:tool/run@0.2.0".into()],
            imports: vec![],
            target: None,
        };
        let packed = pack(b"\0asm\x0d\0\x01\0", info).unwrap();
        let layer = wasm_layer(&packed.manifest, "x").unwrap();
        assert_eq!(layer, packed.layer);
        assert_eq!(layer.size, 8);
        let manifest: serde_json::Value = serde_json::from_slice(&packed.manifest).unwrap();
        assert_eq!(manifest["config"]["mediaType"], CONFIG_MEDIA_TYPE);
        assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
        let config: serde_json::Value = serde_json::from_slice(&packed.config).unwrap();
        assert_eq!(config["architecture"], "wasm");
        assert_eq!(config["os"], "wasip2");
        assert_eq!(config["layerDigests"][0], layer.digest);
        assert_eq!(config["component"]["exports"][0], "murmur:tool/run@0.2.0");
    }

    #[test]
    fn an_image_without_one_wasm_layer_is_not_a_component() {
        let image = br#"{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:0","size":1},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:1","size":1}]}"#;
        let e = wasm_layer(image, "r/a:1").unwrap_err();
        assert_eq!(
            e.message,
            "r/a:1 is not a Wasm component artifact: it does not hold exactly one application/wasm layer"
        );
        assert!(wasm_layer(b"[]", "r/a:1").is_err());
    }
}
