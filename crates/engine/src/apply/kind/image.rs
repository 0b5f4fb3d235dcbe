//! The image step (`image/<name>`): Proxmox downloads the Talos image from
//! the Image Factory (`download-url`), once; a delete removes its volume.

use anyhow::Context as _;

use talosprov_plan::change::ImageOp;
use talosprov_plan::planned::PlannedImage;
use talosprov_proxmox::storage;
use talosprov_statefile::address::Address;
use talosprov_statefile::intent::CreateIntent;

use crate::apply::context::Context;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;

/// Download or delete the image `name`.
///
/// # Errors
/// The Proxmox or Image Factory error, naming the storage or volume.
pub(in crate::apply) async fn run(
    ctx: &Context,
    name: &str,
    op: &ImageOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        ImageOp::Create(want) => image(ctx, name, want, r).await,
        ImageOp::Delete => delete_image(ctx, name, r).await,
    }
}

/// Download one image, once: a volume the storage already lists is
/// recorded as is; a `download` task for its file still running (an
/// interrupted apply started it) is waited for; otherwise the intent is
/// saved, then the `download-url` request sent.
async fn image(ctx: &Context, name: &str, want: &PlannedImage, r: &Reporter) -> anyhow::Result<()> {
    let rec = &want.record;
    let image = talosprov_base::vm::Image {
        talos_version: rec.talos_version.clone(),
        schematic: rec.schematic_id.clone(),
    };
    let address = Address::Image(name.to_owned());
    let cannot = || format!("cannot download the Talos image to {}", rec.storage);
    r.proxmox(async {
        let mut found = storage::image_on_storage(&ctx.proxmox, &rec.node, &rec.storage, &image)
            .await
            .with_context(cannot)?;
        if let storage::ImageOnStorage::Downloading(upid) = &found {
            r.record_saved(Record::Intent {
                address: address.clone(),
                intent: CreateIntent::image(&rec.node, &rec.volid),
            })
            .await?;
            r.progress(format!(
                "waiting for the download already running on {} (task {upid})",
                rec.node
            ));
            let op = talosprov_proxmox::request::Operation::new(format!("download image {}", image.filename()))
                .node(&rec.node);
            if let Err(e) = talosprov_proxmox::task::wait(&ctx.proxmox, &op, upid).await {
                r.warn(format!("the running download did not complete: {e}; downloading again"));
            }
            found = storage::image_on_storage(&ctx.proxmox, &rec.node, &rec.storage, &image)
                .await
                .with_context(cannot)?;
        }
        match found {
            storage::ImageOnStorage::Present => {
                r.progress(format!("already in {} on {}", rec.storage, rec.node));
            }
            storage::ImageOnStorage::Downloading(upid) => {
                anyhow::bail!(
                    "{}: another download of {} is still running on {} (task {upid}); run apply again once it ends",
                    cannot(),
                    image.filename(),
                    rec.node
                );
            }
            storage::ImageOnStorage::Missing => {
                if let Some(Some(schematic)) = ctx.schematics.get(&rec.schematic_id) {
                    r.progress("registering the schematic with the Image Factory");
                    ctx.factory
                        .register(schematic)
                        .await
                        .context("cannot register the schematic with the Image Factory")?;
                }
                r.record_saved(Record::Intent {
                    address: address.clone(),
                    intent: CreateIntent::image(&rec.node, &rec.volid),
                })
                .await?;
                r.progress(format!("downloading to {} on {}", rec.storage, rec.node));
                let d = storage::Download {
                    node: rec.node.clone(),
                    storage: rec.storage.clone(),
                    image: image.clone(),
                };
                let done = storage::download(&ctx.proxmox, &d, &want.factory_url)
                    .await
                    .with_context(cannot)?;
                for w in done.warnings {
                    r.warn(w);
                }
            }
        }
        r.record(Record::Image {
            name: name.to_owned(),
            image: rec.clone(),
        });
        Ok(())
    })
    .await
}

/// Delete an image: the recorded one, or the one an interrupted apply was
/// downloading (waiting first for its task if it still runs).
async fn delete_image(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    let address = Address::Image(name.to_owned());
    r.proxmox(async {
        let target = match ctx.recorded_images.get(name) {
            Some(rec) => Some((rec.node.clone(), rec.volid.clone())),
            None => ctx
                .owned
                .intent(&address)
                .and_then(|i| Some((i.node.clone()?, i.id.clone()))),
        };
        if let Some((node, volid)) = target {
            let file = volid.rsplit('/').next().unwrap_or(&volid).to_owned();
            if let Some(upid) = storage::running_download(&ctx.proxmox, &node, &file).await? {
                r.progress(format!(
                    "waiting for the download still running on {node} (task {upid})"
                ));
                let op =
                    talosprov_proxmox::request::Operation::new(format!("download image {file}"))
                        .node(&node);
                // Its outcome does not matter: the volume is deleted either way.
                let _ = talosprov_proxmox::task::wait(&ctx.proxmox, &op, &upid).await;
            }
            storage::delete_volume(&ctx.proxmox, &node, &volid)
                .await
                .with_context(|| format!("cannot delete {volid}"))?;
        }
        r.record(Record::ImageGone(name.to_owned()));
        Ok(())
    })
    .await
}
