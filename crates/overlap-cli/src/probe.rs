//! `overlap probe` (being written).
use anyhow::Result;

/// Options of `overlap probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {}

pub fn run(_args: ProbeArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
