//! The state's versioned format, pure: the document (`format`), resource
//! addresses (`address`), create intents (`intent`), lock records (`lock`), the
//! backend settings as resolved from flags, the topology and the environment
//! (`config`), and the summary a backup is judged by (`summary`). The backends
//! that store it live in `talosprov-backend`.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod address;
pub mod config;
pub mod format;
pub mod intent;
pub mod lock;
pub mod rotation;
pub mod summary;
