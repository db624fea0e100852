//! The offsets of a broadcasting consumer, kept in a local file (the core decides when:
//! `PullEvent::LoadOffset` and `PullEvent::Persist`).
//!
//! One line per queue, `topic<TAB>broker<TAB>queue id<TAB>offset`; a line that does not parse is
//! skipped with a warning. Saved whole and atomically: written to `<file>.tmp`, then renamed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tracing::warn;

type Name = (String, String, i32);

pub(crate) struct LocalStore {
    path: PathBuf,
    offsets: BTreeMap<Name, i64>,
    dirty: bool,
}

impl LocalStore {
    /// The store at `path`, with what the file holds (nothing when it does not exist).
    pub(crate) fn open(path: PathBuf) -> LocalStore {
        let mut offsets = BTreeMap::new();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            let parsed = match f[..] {
                [t, b, q, o] => q.parse().ok().zip(o.parse().ok()).map(|qo| (t, b, qo)),
                _ => None,
            };
            match parsed {
                Some((t, b, (q, o))) => {
                    offsets.insert((t.to_owned(), b.to_owned(), q), o);
                }
                None => warn!(path = %path.display(), line, "offset line skipped"),
            }
        }
        LocalStore {
            path,
            offsets,
            dirty: false,
        }
    }

    pub(crate) fn get(&self, topic: &str, broker: &str, queue_id: i32) -> Option<i64> {
        let name = (topic.to_owned(), broker.to_owned(), queue_id);
        self.offsets.get(&name).copied()
    }

    pub(crate) fn set(&mut self, topic: &str, broker: &str, queue_id: i32, offset: i64) {
        let name = (topic.to_owned(), broker.to_owned(), queue_id);
        self.dirty |= self.offsets.insert(name, offset) != Some(offset);
    }

    /// Writes the file if an offset changed since the last save.
    pub(crate) fn save(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let mut text = String::new();
        for ((t, b, q), o) in &self.offsets {
            text.push_str(&format!("{t}\t{b}\t{q}\t{o}\n"));
        }
        let tmp = self.path.with_extension("tmp");
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let r = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, text))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = r {
            self.dirty = true;
            warn!(path = %self.path.display(), "offsets not saved: {e}");
        }
    }
}

/// `$HOME/.rmq/offsets/<instance>/<group>.offsets` (the current directory without `HOME`).
pub(crate) fn default_path(instance: &str, group: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".rmq/offsets")
        .join(instance)
        .join(format!("{group}.offsets"))
}

#[cfg(test)]
mod tests;
