//! The command line as users of `oshrun`, `mpirun` and `oshcc` type it, rewritten before clap
//! parses it:
//!
//! - a `ferroshmem` started through a link named `oshrun`, `oshcc` or `oshc++` (also
//!   `oshcxx`, `oshCC`) acts as `ferroshmem run`, `ferroshmem cc` or `ferroshmem c++`;
//! - `run`'s long options may be written with one dash, as `mpirun` takes them: `-np 4`,
//!   `-np=4`, `-npernode 2` and `-hosts a,b` mean `--np 4`, `--np=4`, `--npernode 2` and
//!   `--hosts a,b`; and a short option's value may be attached, `-n4` or `-n=4`. (Clap alone
//!   takes such words for the PE program, whose words may start with `-`.)
//!
//! Only the words before the PE program are rewritten: the program's own arguments
//! (`ferroshmem run -n 2 prog -np 3`), and everything after `--`, reach it unchanged. Which
//! words are `run`'s options, and which of them take a value, is read from `run`'s clap
//! definition, so new options are covered without a list to keep up to date here.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::{Arg, Command};

/// What the program's name becomes when it was started under an alias (`oshcc`), so that
/// clap's messages name the command that is meant.
const PROGRAM_NAME: &str = "ferroshmem";

/// `argv` (the program's name first) as clap should see it: see the module doc. `cli` is the
/// clap definition of the whole `ferroshmem` command line.
pub fn normalize(argv: impl IntoIterator<Item = OsString>, cli: &Command) -> Vec<OsString> {
    let mut argv: Vec<OsString> = argv.into_iter().collect();
    let alias = argv
        .first()
        .and_then(|name| Path::new(name).file_name())
        .and_then(subcommand_of_alias);
    if let Some(subcommand) = alias {
        argv.splice(0..1, [PROGRAM_NAME.into(), subcommand.into()]);
    }
    // The top-level options (--help, --version) take no value, so the first word that is not
    // an option names the subcommand.
    let subcommand_at = argv
        .iter()
        .skip(1)
        .position(|word| !word.as_encoded_bytes().starts_with(b"-"))
        .map(|i| i + 1);
    if let Some(at) = subcommand_at {
        if let Some(run) = cli
            .find_subcommand(&argv[at])
            .filter(|c| c.get_name() == "run")
        {
            let options_and_program = argv.split_off(at + 1);
            argv.extend(spell_options_for_clap(options_and_program, run));
        }
    }
    argv
}

/// The subcommand that a `ferroshmem` started under the file name `name` acts as.
fn subcommand_of_alias(name: &OsStr) -> Option<&'static str> {
    match name.to_str()? {
        "oshrun" => Some("run"),
        "oshcc" => Some("cc"),
        "oshc++" | "oshcxx" | "oshCC" => Some("c++"),
        _ => None,
    }
}

/// `words` with `command`'s options spelt as clap reads them, up to the first word that is
/// not an option or an option's value (the PE program), or `--`: `-LONG` and `-LONG=VALUE`
/// become `--LONG...` for each long option (or alias) of `command`, and a short option's
/// attached value (`-n4`, `-n=4`) becomes a word of its own (`-n 4`), which clap would
/// otherwise take for the program when the program's words may start with `-`.
fn spell_options_for_clap(words: Vec<OsString>, command: &Command) -> Vec<OsString> {
    let mut out = Vec::with_capacity(words.len() + 1);
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let Some(text) = word.to_str().filter(|t| t.starts_with('-') && t.len() > 1) else {
            out.push(word);
            break;
        };
        if text == "--" {
            out.push(word);
            break;
        }
        let takes_next_word = if let Some(long) = text.strip_prefix("--") {
            let takes = !long.contains('=') && long_option(command, long).is_some_and(takes_value);
            out.push(word);
            takes
        } else {
            spell_single_dash_word(&text[1..], command, &mut out)
        };
        if takes_next_word {
            out.extend(words.next());
        }
    }
    out.extend(words);
    out
}

/// Pushes the word `-body` onto `out` as clap reads it (see [`spell_options_for_clap`]), and
/// returns whether the next word is its option's value.
fn spell_single_dash_word(body: &str, command: &Command, out: &mut Vec<OsString>) -> bool {
    let (name, value) = match body.split_once('=') {
        Some((name, _)) => (name, true),
        None => (body, false),
    };
    if let Some(option) = long_option(command, name).filter(|_| name.len() > 1) {
        out.push(format!("--{body}").into());
        return !value && takes_value(option);
    }
    for (i, letter) in body.char_indices() {
        let option = command.get_arguments().find(|arg| {
            arg.get_short_and_visible_aliases()
                .is_some_and(|shorts| shorts.contains(&letter))
        });
        if option.is_some_and(takes_value) {
            let (flags, attached) = body.split_at(i + letter.len_utf8());
            out.push(format!("-{flags}").into());
            let attached = attached.strip_prefix('=').unwrap_or(attached);
            if attached.is_empty() {
                return true;
            }
            out.push(attached.into());
            return false;
        }
    }
    out.push(format!("-{body}").into());
    false
}

/// `command`'s option whose long name or an alias of it is `name`.
fn long_option<'a>(command: &'a Command, name: &str) -> Option<&'a Arg> {
    command.get_arguments().find(|arg| {
        !arg.is_positional()
            && (arg.get_long() == Some(name)
                || arg
                    .get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&name)))
    })
}

/// Whether `option` takes a value (rather than being a switch).
fn takes_value(option: &Arg) -> bool {
    option.get_action().takes_values()
}
