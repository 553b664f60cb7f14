//! Fetching one component: its manifest, its one wasm layer, kept in the store under
//! its digest. A component already kept is not fetched again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::client::Client;
use super::layout;
use super::progress::Progress;
use super::reference::Reference;
use super::store::{Store, digest_of};
use crate::error::Error;

/// A component in the store.
pub struct Fetched {
    /// `sha256:<hex>` of the component.
    pub digest: String,
    pub size: u64,
    pub path: PathBuf,
    /// It was in the store already.
    pub cached: bool,
    /// How long asking the registry and downloading took.
    pub fetching: Duration,
}

/// What the registry says `reference` is: the digest and size of its component.
pub async fn look_up(client: &Client, reference: &Reference) -> Result<layout::Descriptor, Error> {
    let (bytes, _) = client
        .manifest(&reference.repository, reference.manifest_key())
        .await?;
    if let Some(want) = &reference.digest {
        let found = digest_of(&bytes);
        if &found != want {
            return Err(Error::new(
                "E-REG-006",
                format!(
                    "{reference}: the registry's manifest is {found}, not the {want} asked for"
                ),
            )
            .hint("the registry's copy is damaged or was tampered with; nothing was kept"));
        }
    }
    layout::wasm_layer(&bytes, &reference.to_string())
}

/// Fetches the component `layer` of `reference` into `store`, unless it is there.
pub async fn component(
    client: &Client,
    reference: &Reference,
    layer: &layout::Descriptor,
    store: &Store,
) -> Result<Fetched, Error> {
    let started = Instant::now();
    let what = format!("component of {reference}");
    if let Some(path) = store.verified(&layer.digest, &what)? {
        return Ok(Fetched {
            digest: layer.digest.clone(),
            size: layer.size,
            path,
            cached: true,
            fetching: started.elapsed(),
        });
    }
    let mut answer = client.blob(&reference.repository, &layer.digest).await?;
    let mut progress = Progress::new(reference.to_string(), layer.size);
    let path = store
        .write(&layer.digest, layer.size, &mut answer.body, &mut progress)
        .await?;
    Ok(Fetched {
        digest: layer.digest.clone(),
        size: layer.size,
        path,
        cached: false,
        fetching: started.elapsed(),
    })
}
