//! OpenTofu habits on our command line: a single-dash argument whose name
//! (before any `=`) is one of the command's long flags is read as that long
//! flag (`-auto-approve`, `-out=plan.cache`, `-raw`). Short flags stay short.

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::Command;

/// Rewrite `args` (program name first) so that each single-dash long flag of
/// the command being invoked gets its second dash. The flags come from clap's
/// own description of `root` (subcommands and global flags included), so a new
/// flag needs no list kept here. Arguments after `--` and values that are
/// not flags of the command are left alone.
pub fn normalise(args: Vec<OsString>, root: &Command) -> Vec<OsString> {
    let mut root = root.clone();
    root.build();
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    out.extend(args.next());
    let mut current = &root;
    let mut longs = long_flags(current);
    let mut rest_positional = false;
    for arg in args {
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if rest_positional {
            out.push(arg);
            continue;
        }
        if text == "--" {
            rest_positional = true;
            out.push(arg);
            continue;
        }
        if !text.starts_with('-') {
            if let Some(sub) = current.find_subcommand(text) {
                current = sub;
                let globals: Vec<String> = longs.clone().into_iter().collect();
                longs = long_flags(current);
                longs.extend(globals.into_iter().filter(|g| is_global(&root, g)));
            }
            out.push(arg);
            continue;
        }
        if let Some(rest) = text.strip_prefix('-')
            && !rest.starts_with('-')
            && rest.len() > 1
        {
            let name = rest.split_once('=').map_or(rest, |(n, _)| n);
            if longs.contains(name) {
                out.push(OsString::from(format!("-{text}")));
                continue;
            }
        }
        out.push(arg);
    }
    out
}

/// The long names and long aliases of a command's arguments.
fn long_flags(cmd: &Command) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for arg in cmd.get_arguments() {
        names.extend(arg.get_long().map(str::to_owned));
        names.extend(
            arg.get_all_aliases()
                .into_iter()
                .flatten()
                .map(str::to_owned),
        );
    }
    names
}

/// Whether `long` is a global flag of the root command.
fn is_global(root: &Command, long: &str) -> bool {
    root.get_arguments()
        .any(|a| a.is_global_set() && a.get_long() == Some(long))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn cli() -> Command {
        Command::new("talosprov")
            .arg(
                Arg::new("verbose")
                    .short('v')
                    .long("verbose")
                    .global(true)
                    .action(ArgAction::Count),
            )
            .subcommand(
                Command::new("output")
                    .arg(Arg::new("raw").long("raw").action(ArgAction::SetTrue))
                    .arg(Arg::new("json").long("json").action(ArgAction::SetTrue))
                    .arg(Arg::new("file").short('f').long("file"))
                    .arg(Arg::new("name")),
            )
            .subcommand(
                Command::new("state").subcommand(
                    Command::new("rm")
                        .arg(
                            Arg::new("auto-approve")
                                .long("auto-approve")
                                .action(ArgAction::SetTrue),
                        )
                        .arg(Arg::new("out").long("out"))
                        .arg(Arg::new("address").num_args(1..)),
                ),
            )
    }

    fn run(line: &str) -> String {
        let args = line.split(' ').map(OsString::from).collect();
        normalise(args, &cli())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn single_dash_long_flags_get_a_second_dash() {
        assert_eq!(
            run("talosprov output kubeconfig -raw"),
            "talosprov output kubeconfig --raw"
        );
        assert_eq!(run("talosprov output -json"), "talosprov output --json");
        assert_eq!(
            run("talosprov state rm -auto-approve -out=x.plan vm/a"),
            "talosprov state rm --auto-approve --out=x.plan vm/a"
        );
    }

    #[test]
    fn short_flags_and_global_long_flags_are_handled() {
        assert_eq!(
            run("talosprov -v output -f c.yaml -raw"),
            "talosprov -v output -f c.yaml --raw"
        );
        assert_eq!(
            run("talosprov output -vv -verbose"),
            "talosprov output -vv --verbose"
        );
        assert_eq!(run("talosprov output -help"), "talosprov output --help");
    }

    #[test]
    fn flags_of_other_commands_and_after_double_dash_are_left_alone() {
        assert_eq!(
            run("talosprov output -auto-approve"),
            "talosprov output -auto-approve"
        );
        assert_eq!(
            run("talosprov state rm -- -raw"),
            "talosprov state rm -- -raw"
        );
        assert_eq!(run("talosprov output --json"), "talosprov output --json");
    }
}
