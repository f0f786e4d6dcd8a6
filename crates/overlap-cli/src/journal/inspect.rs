//! Reading a journal back: `dump`, `verify` and `repair`.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use overlapped_journal::Options;
use serde::Serialize;

use super::mode;

#[derive(Serialize)]
struct DumpLine<'a> {
    lsn: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_b64: Option<String>,
}

/// The plain-dump form of a payload: as it is when it is UTF-8 without
/// control characters and does not start with `"`; otherwise quoted with
/// escapes. The two forms never coincide.
fn plain(data: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(t) = std::str::from_utf8(data) {
        if !t.starts_with('"') && !t.chars().any(char::is_control) {
            return t.into();
        }
    }
    let mut out = String::with_capacity(data.len() + 2);
    out.push('"');
    for chunk in data.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c if c.is_control() => {
                    let mut b = [0u8; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out.push('"');
    out.into()
}

pub(super) fn dump(dir: &Path, json: bool, strict: bool) -> Result<()> {
    let opts = Options::default().recovery(mode(strict));
    let (report, records) = overlapped_journal::inspect(dir, &opts)
        .with_context(|| format!("reading {}", dir.display()))?;
    if report.live {
        eprintln!(
            "note: another process is appending to {}; showing the durable prefix (up to LSN {})",
            dir.display(),
            report.checkpoint_durable_lsn
        );
    }
    let stdout = std::io::stdout();
    let mut o = std::io::BufWriter::new(stdout.lock());
    let b64 = base64::engine::general_purpose::STANDARD;
    for r in records {
        let r = r?;
        if json {
            let text = std::str::from_utf8(&r.data).ok();
            let line = DumpLine {
                lsn: r.lsn.0,
                data: text,
                data_b64: text.is_none().then(|| b64.encode(&r.data)),
            };
            serde_json::to_writer(&mut o, &line)?;
            writeln!(o)?;
        } else {
            writeln!(o, "{}\t{}", r.lsn, plain(&r.data))?;
        }
    }
    o.flush()?;
    if let (Some(at), Some(d)) = (report.truncated_at, &report.damage) {
        eprintln!(
            "note: the log has a torn tail at LSN {at} ({d}) that recovery would cut off \
             (nothing valid follows it)"
        );
    }
    Ok(())
}

pub(super) fn verify(dir: &Path, strict: bool, json: bool) -> Result<()> {
    let opts = Options::default().recovery(mode(strict));
    match overlapped_journal::verify(dir, &opts) {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "ok: {} records in {} segments, LSN {}..{}; durable point {}{}",
                    r.records,
                    r.segments,
                    r.start_lsn,
                    r.end_lsn,
                    r.checkpoint_durable_lsn,
                    if r.live {
                        " (another process is appending: the durable prefix was checked)"
                    } else {
                        ""
                    }
                );
                if let (Some(at), Some(d)) = (r.truncated_at, &r.damage) {
                    println!(
                        "recovery would cut a torn tail at LSN {at} ({d}): it is past the \
                         checkpoint's durable point and no valid record follows it"
                    );
                }
            }
            Ok(())
        }
        Err(e @ overlapped_journal::Error::Corrupt { .. }) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"corrupt": true, "error": e.to_string()})
                );
            }
            bail!(
                "{}: {e}\n(`overlap journal repair {}` drops the damaged stretches, keeps every valid record after them, and saves and lists what it drops; `--dry-run` first)",
                dir.display(),
                dir.display()
            )
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!("verifying {}", dir.display()))),
    }
}

pub(super) fn repair(dir: &Path, dry_run: bool, json: bool) -> Result<()> {
    let stdout = std::io::stdout();
    let mut o = std::io::BufWriter::new(stdout.lock());
    let mut failed: Option<std::io::Error> = None;
    // Every dropped stretch is listed as it is found (all of them; the
    // report keeps only the first ones).
    let mut each = |d: &overlapped_journal::DroppedStretch| {
        if failed.is_some() {
            return;
        }
        let res = if json {
            serde_json::to_writer(&mut o, &serde_json::json!({ "dropped": d }))
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(o))
        } else {
            let records = match d.records {
                0 => String::new(),
                n => format!(" ({n} valid record(s) of an incomplete batch)"),
            };
            writeln!(
                o,
                "dropped\t{}\t{}\t{}\t{}{records}",
                d.from,
                d.to,
                d.to - d.from,
                d.damage
            )
        };
        if let Err(e) = res {
            failed = Some(e);
        }
    };
    let opts = Options::default();
    let r = overlapped_journal::repair(dir, &opts, dry_run, &mut each).with_context(|| {
        format!(
            "{} {}",
            if dry_run { "checking" } else { "repairing" },
            dir.display()
        )
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if json {
        serde_json::to_writer(&mut o, &r)?;
        writeln!(o)?;
        o.flush()?;
        return lost_acknowledged(dir, &r, dry_run);
    }
    if !r.changes_anything() {
        writeln!(
            o,
            "nothing to repair: {} records, LSN {}..{}",
            r.records, r.start_lsn, r.end_lsn
        )?;
        o.flush()?;
        return Ok(());
    }
    print_plan(&mut o, dir, &r, dry_run)?;
    o.flush()?;
    lost_acknowledged(dir, &r, dry_run)
}

/// The plan a repair made (the dropped stretches are listed already).
fn print_plan(
    o: &mut impl Write,
    dir: &Path,
    r: &overlapped_journal::RecoveryReport,
    dry_run: bool,
) -> Result<()> {
    let would = if dry_run { "would " } else { "" };
    for seq in &r.rewritten_headers {
        writeln!(
            o,
            "rewrite-header\t{seq}\tthe segment's header is not valid"
        )?;
    }
    for seq in &r.removed_segments {
        writeln!(
            o,
            "remove-segment\t{seq}\toutside the log, with a bad header or data"
        )?;
    }
    if r.dropped_stretches > 0 {
        writeln!(
            o,
            "{would}drop {} damaged stretch(es), {} log bytes{} (listed above: dropped, from \
             LSN, to LSN, bytes, damage)",
            r.dropped_stretches,
            r.dropped_bytes,
            match r.dropped_records {
                0 => String::new(),
                n => format!(", with {n} valid record(s) of incomplete batches"),
            }
        )?;
    }
    if !r.rewritten_headers.is_empty() || !r.removed_segments.is_empty() {
        writeln!(
            o,
            "{would}rewrite {} segment header(s) and remove {} segment file(s) (listed above)",
            r.rewritten_headers.len(),
            r.removed_segments.len()
        )?;
    }
    writeln!(
        o,
        "{would}keep {} record(s), {} of them after the first damage",
        r.records, r.salvaged_records
    )?;
    match &r.dropped_file {
        Some(f) => writeln!(o, "saved the dropped, rewritten and removed bytes to {f}")?,
        None if dry_run => writeln!(
            o,
            "dry run: nothing was changed (a repair first saves every byte it drops, rewrites or \
             removes to {}/dropped-<N>.bin)",
            dir.display()
        )?,
        None => {}
    }
    writeln!(
        o,
        "new records {would}continue at LSN {} (a dropped or acknowledged LSN is never handed \
         out again)",
        r.end_lsn
    )?;
    Ok(())
}

/// Fails, naming the LSNs, when records acknowledged durable are (or
/// would be) lost: the repair is done, but the loss must not pass
/// unnoticed.
fn lost_acknowledged(
    dir: &Path,
    r: &overlapped_journal::RecoveryReport,
    dry_run: bool,
) -> Result<()> {
    if !r.cut_acknowledged {
        return Ok(());
    }
    let durable = r.checkpoint_durable_lsn;
    let ranges: Vec<String> = r
        .dropped
        .iter()
        .filter(|d| d.from < durable)
        .map(|d| format!("{}..{}", d.from, d.to.min(durable)))
        .collect();
    bail!(
        "{}: records acknowledged durable {} lost: LSN {} (below the durable point {durable} the \
         checkpoint records){}",
        dir.display(),
        if dry_run { "would be" } else { "were" },
        ranges.join(", "),
        if dry_run {
            ""
        } else {
            "; the journal is repaired and opens"
        }
    )
}
