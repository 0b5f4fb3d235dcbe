//! The byte budgets of one command's patch work. Building a node's machine config merges
//! every patch file the node uses; the work and the memory of a command grow with the bytes
//! merged over every node, not with the number of files. So each node may merge at most
//! [`PatchBudgets::per_node`] bytes of patches (its files of `common/`, of its role's folder,
//! of its pool's folder and of its own folder, plus the bootstrap add-ons' manifests on a
//! control plane), and the
//! nodes of one command together [`PatchBudgets::per_command`]. `validate`, `render`, `plan`
//! and `apply` all obey them. One template render may also build at most
//! [`PatchBudgets::template_value`] bytes in one value and [`PatchBudgets::template_work`]
//! bytes in all. Each is raised for the rare honest case with an environment variable
//! ([`NODE_ENV`], [`COMMAND_ENV`], [`TEMPLATE_VALUE_ENV`], [`TEMPLATE_WORK_ENV`]) that the
//! error names.

use std::sync::atomic::{AtomicU64, Ordering};

/// The default of [`PatchBudgets::per_node`]: 8 MiB, two full-size input files, some
/// thirty times what the reference cluster's largest node merges.
pub const DEFAULT_NODE_PATCH_BYTES: u64 = 8 * 1024 * 1024;

/// The default of [`PatchBudgets::per_command`]: 256 MiB, over what 1,000 nodes that each
/// merge 200 shared patches of 1 KiB add up to (195 MiB), under what 1,000 nodes sharing one
/// full-size 4 MiB patch would.
pub const DEFAULT_COMMAND_PATCH_BYTES: u64 = 256 * 1024 * 1024;

/// The variable that sets [`PatchBudgets::per_node`] (a size: `16MiB`, `512KiB`, bytes).
pub const NODE_ENV: &str = "TALOSPROV_NODE_PATCH_BYTES";

/// The variable that sets [`PatchBudgets::per_command`].
pub const COMMAND_ENV: &str = "TALOSPROV_COMMAND_PATCH_BYTES";

/// The default of [`PatchBudgets::template_value`]: 4 MiB, the size of an input file,
/// which a rendered patch cannot exceed either.
pub const DEFAULT_TEMPLATE_VALUE_BYTES: u64 = 4 * 1024 * 1024;

/// The default of [`PatchBudgets::template_work`]: 64 MiB; the reference templates build a
/// few KiB per node.
pub const DEFAULT_TEMPLATE_WORK_BYTES: u64 = 64 * 1024 * 1024;

/// The variable that sets [`PatchBudgets::template_value`].
pub const TEMPLATE_VALUE_ENV: &str = "TALOSPROV_TEMPLATE_VALUE_BYTES";

/// The variable that sets [`PatchBudgets::template_work`].
pub const TEMPLATE_WORK_ENV: &str = "TALOSPROV_TEMPLATE_WORK_BYTES";

/// The byte budgets in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchBudgets {
    /// The most patch bytes one node merges.
    pub per_node: u64,
    /// The most patch bytes all the nodes of one command merge.
    pub per_command: u64,
    /// The largest value (string, list or map, as `patch::budget::measure` sizes it) one
    /// template render may build or bind. What a render writes out is still read as an
    /// input file, within the loader's input budget.
    pub template_value: u64,
    /// What one template render may build in total: every result of a filter, function or
    /// growing operator, every binding and every value written out, summed.
    pub template_work: u64,
}

impl Default for PatchBudgets {
    fn default() -> Self {
        PatchBudgets {
            per_node: DEFAULT_NODE_PATCH_BYTES,
            per_command: DEFAULT_COMMAND_PATCH_BYTES,
            template_value: DEFAULT_TEMPLATE_VALUE_BYTES,
            template_work: DEFAULT_TEMPLATE_WORK_BYTES,
        }
    }
}

static NODE: AtomicU64 = AtomicU64::new(DEFAULT_NODE_PATCH_BYTES);
static COMMAND: AtomicU64 = AtomicU64::new(DEFAULT_COMMAND_PATCH_BYTES);
static TEMPLATE_VALUE: AtomicU64 = AtomicU64::new(DEFAULT_TEMPLATE_VALUE_BYTES);
static TEMPLATE_WORK: AtomicU64 = AtomicU64::new(DEFAULT_TEMPLATE_WORK_BYTES);

impl PatchBudgets {
    /// The budgets in force for this process.
    pub fn current() -> Self {
        PatchBudgets {
            per_node: NODE.load(Ordering::Relaxed),
            per_command: COMMAND.load(Ordering::Relaxed),
            template_value: TEMPLATE_VALUE.load(Ordering::Relaxed),
            template_work: TEMPLATE_WORK.load(Ordering::Relaxed),
        }
    }

    /// Put these budgets in force for this process (the CLI does, from the environment).
    pub fn install(self) {
        NODE.store(self.per_node, Ordering::Relaxed);
        COMMAND.store(self.per_command, Ordering::Relaxed);
        TEMPLATE_VALUE.store(self.template_value, Ordering::Relaxed);
        TEMPLATE_WORK.store(self.template_work, Ordering::Relaxed);
    }

    /// The defaults, with [`NODE_ENV`], [`COMMAND_ENV`], [`TEMPLATE_VALUE_ENV`] and
    /// [`TEMPLATE_WORK_ENV`] applied when `var` gives them.
    ///
    /// # Errors
    /// A variable whose value is not a size, naming it.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut b = PatchBudgets::default();
        for (name, slot) in [
            (NODE_ENV, &mut b.per_node),
            (COMMAND_ENV, &mut b.per_command),
            (TEMPLATE_VALUE_ENV, &mut b.template_value),
            (TEMPLATE_WORK_ENV, &mut b.template_work),
        ] {
            if let Some(text) = var(name) {
                *slot = parse_size(&text).map_err(|e| format!("{name}={text:?}: {e}"))?;
            }
        }
        Ok(b)
    }
}

/// A size in bytes: a whole number, optionally followed by `KiB`, `MiB` or `GiB` (or `K`,
/// `M`, `G`, the same binary units).
///
/// # Errors
/// Anything else, or a size of 0 or over 2^53.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = t.split_at(digits);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => return Err(format!("unknown unit {other:?}; use KiB, MiB or GiB")),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| "expected a size such as 16MiB".to_string())?;
    match n.checked_shl(shift) {
        Some(v) if v > 0 && v >> shift == n && v <= 1 << 53 => Ok(v),
        Some(_) | None => Err("the size must be between 1 byte and 8 PiB".into()),
    }
}

/// A size for a message: `4.0 MiB`, `1.9 KiB`, `300 bytes`, to one decimal so that
/// two sizes either side of a budget never read the same.
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        for bad in ["", "0", "MiB", "1TB", "99999999999999999999", "-1"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        let b = PatchBudgets::from_env(|n| (n == NODE_ENV).then(|| "1MiB".to_string())).unwrap();
        assert_eq!(b.per_node, 1 << 20);
        assert_eq!(b.per_command, DEFAULT_COMMAND_PATCH_BYTES);
        let e = PatchBudgets::from_env(|_| Some("lots".into())).unwrap_err();
        assert!(e.contains(NODE_ENV), "{e}");
    }
}
