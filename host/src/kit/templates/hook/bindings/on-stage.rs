            Event::Stage(stage) => Ok(write_manifests(&stage.shell_allow)),
//--
use exports::murmur::hook::lifecycle::ManifestFile;

/// `write-manifests`: a tool manifest (`tools/<binary>/murmur.yaml`) for each binary
/// the capsule allows its shell; the host writes only those, only under `tools/`.
fn write_manifests(allowed: &[String]) -> Verdict {
    let files = allowed
        .iter()
        .map(|binary| ManifestFile {
            binary_name: binary.clone(),
            content: format!(
                "name: {binary}\ndescription: \"{binary}, as the capsule allows it\"\n"
            ),
        })
        .collect();
    Verdict::WriteManifests(files)
}
