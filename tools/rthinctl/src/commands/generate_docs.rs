// SPDX-License-Identifier: GPL-2.0
//! `generate-docs DIR`: man pages and shell completions.

use std::io::Write;

use crate::cli::{command, honoured_by, CHECK_EXIT_CODES, DEVICES, EXIT_CODES};
use crate::explain::{exit, Error, Result};

/// `generate-docs DIR`.
pub fn run(dir: &std::path::Path) -> Result<i32> {
    generate_docs(dir)
        .map(|_| exit::OK)
        .map_err(|e| Error::new(exit::OTHER, format!("{}: {e}", dir.display())))
}

/// The man pages (`rthinctl.8`, `rthinctl-SUB.8` for each subcommand) and
/// the shell completions, generated from the command definition so they
/// cannot drift from `--help`.
fn generate_docs(dir: &std::path::Path) -> std::io::Result<()> {
    let man = dir.join("man8");
    let comp = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&comp)?;
    // `rthinctl help` is `--help`: no page of its own, so none listed.
    let mut cmd = without_help_subcommand(command().version(env!("CARGO_PKG_VERSION")));
    cmd.build();
    fn pages(cmd: &clap::Command, prefix: &str, dir: &std::path::Path) -> std::io::Result<()> {
        let name = if prefix.is_empty() {
            cmd.get_name().to_string()
        } else {
            format!("{prefix}-{}", cmd.get_name())
        };
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.8")))?);
        man_page(cmd.clone().name(name.clone()), &mut f)?;
        f.flush()?;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(sub, &name, dir)?;
        }
        Ok(())
    }
    pages(&cmd, "", &man)?;
    use clap_complete::Shell;
    // Hidden commands (generate-docs, the underscore aliases) are not offered.
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    let mut visible = visible_only(&cmd, "", &globals);
    for sh in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(sh, &mut visible, "rthinctl", &comp)?;
        match sh {
            Shell::Bash | Shell::Fish => {
                let names = if sh == Shell::Bash {
                    BASH_NAMES
                } else {
                    FISH_NAMES
                };
                let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
                f.write_all(names.as_bytes())?;
            }
            Shell::Zsh => {
                let text = std::fs::read_to_string(&path)?;
                std::fs::write(&path, zsh_with_names(&text))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Zsh: clap's specs complete a POOL or DEV argument with `_default`
/// (file names); they get pool (and, for status, thin) names from
/// device-mapper instead, from functions put before the script's end.
fn zsh_with_names(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let names = if line.starts_with("'*::devs -- ") {
            Some("_rthinctl_devs")
        } else if line.starts_with("':pool -- ")
            || line.starts_with("'::pool -- ")
            || line.starts_with("'*::pools -- ")
            || line.starts_with("'--live=[")
        {
            Some("_rthinctl_pools")
        } else {
            None
        };
        match names {
            Some(f) => out.push_str(&line.replacen(":_default'", &format!(":{f}'"), 1)),
            None if line.starts_with("if [ \"$funcstack[1]\" = \"_rthinctl\" ]") => {
                out.push_str(ZSH_NAMES);
                out.push_str(line);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Zsh: the name functions [`zsh_with_names`] points the specs at.
const ZSH_NAMES: &str = r#"# Pool and thin names from device-mapper (added by rthinctl).
_rthinctl_dm_names() {
    local t
    local -a names
    for t in "$@"; do
        names+=(${${(f)"$(dmsetup ls --target $t 2>/dev/null)"}%%[[:space:]]*})
    done
    names=(${names:#No})
    compadd -a names
}
_rthinctl_pools() { _rthinctl_dm_names thin-pool rthin-pool }
_rthinctl_devs() { _rthinctl_dm_names thin-pool rthin-pool thin rthin }

"#;

/// `c` and its subcommands without the implicit `help` subcommand.
fn without_help_subcommand(c: clap::Command) -> clap::Command {
    let mut c = c.disable_help_subcommand(true);
    for sub in c.get_subcommands_mut() {
        *sub = without_help_subcommand(sub.clone());
    }
    c
}

/// A copy of the command `c` (named `path`, "" for rthinctl itself) for
/// the completions: clap's generators offer hidden subcommands and flags
/// too, so they are left out, and each subcommand gets, as its own flags,
/// the global flags it honours (all of them before a subcommand).
fn visible_only(c: &clap::Command, path: &str, globals: &[clap::Arg]) -> clap::Command {
    let ok = honoured_by(path);
    let own = c.get_arguments().filter(|a| {
        !a.is_hide_set() && !a.is_global_set() && !matches!(a.get_id().as_str(), "help" | "version")
    });
    let global = globals
        .iter()
        .filter(|g| path.is_empty() || ok.contains(&g.get_id().as_str()))
        .map(|g| g.clone().global(false));
    let mut v = clap::Command::new(c.get_name().to_string())
        .args(own.cloned().chain(global))
        .disable_help_subcommand(true);
    if let Some(a) = c.get_about() {
        v = v.about(a.clone());
    }
    for sub in c.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("{path} {}", sub.get_name())
            .trim_start()
            .to_string();
        v = v.subcommand(visible_only(sub, &name, globals));
    }
    v
}

/// One man page: clap_mangen's sections, then the devices note and the
/// exit status as man pages set them (a tagged paragraph per code; clap's
/// after-help text would be reflowed into one paragraph).
fn man_page(cmd: clap::Command, w: &mut dyn Write) -> std::io::Result<()> {
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_version = cmd.get_version().is_some();
    let man = clap_mangen::Man::new(cmd)
        .section("8")
        .manual("System Administration")
        .source(format!("rthinctl {}", env!("CARGO_PKG_VERSION")));
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if has_args {
        man.render_options_section(w)?;
    }
    if has_subs {
        man.render_subcommands_section(w)?;
    }
    writeln!(w, ".SH DEVICES")?;
    for (i, line) in DEVICES.iter().enumerate() {
        writeln!(w, "{}{line}", if i == 0 { "" } else { ".br\n" })?;
    }
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in EXIT_CODES {
        writeln!(w, ".TP\n{code}\n{meaning}")?;
    }
    writeln!(w, ".PP\n{CHECK_EXIT_CODES}")?;
    if has_version {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// Bash: pool and thin names from device-mapper (either target) where a
/// command takes one, after clap's completion of the options.
const BASH_NAMES: &str = r#"
# Pool and thin names, where a command takes one (added by rthinctl).
_rthinctl_dm_names() {
	local t
	for t in "$@"; do dmsetup ls --target "$t" 2>/dev/null; done |
		awk '$1 != "No" { print $1 }'
}
_rthinctl_names() {
	_rthinctl "$@"
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} w words=
	[[ $cur == -* ]] && return 0
	for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
		case $w in -*) ;; *) words="$words $w" ;; esac
	done
	local pools="thin-pool rthin-pool" names=
	case "$prev" in
	--live) names=$(_rthinctl_dm_names $pools) ;;
	*)
		case "$words" in
		" status"*) names=$(_rthinctl_dm_names $pools thin rthin) ;;
		" ls" | " watch"* | " create-thin" | " create-snap" | " delete" | " set-transaction-id" | 			" message" | " metadata-snap reserve" | " metadata-snap release" | " metadata-snap show")
			names=$(_rthinctl_dm_names $pools) ;;
		*) return 0 ;;
		esac
		;;
	esac
	COMPREPLY=($(compgen -W "$names" -- "$cur"))
}
complete -F _rthinctl_names -o nosort -o bashdefault -o default rthinctl
"#;

/// Fish: the same names.
const FISH_NAMES: &str = r#"
# Pool and thin names, where a command takes one (added by rthinctl).
function __rthinctl_dm_names
	for t in $argv
		dmsetup ls --target $t 2>/dev/null | string match -rv '^No devices' | string replace -r '\s.*' ''
	end
end
complete -c rthinctl -n "__fish_seen_subcommand_from ls watch create-thin create-snap delete set-transaction-id message reserve release show" -f -a "(__rthinctl_dm_names thin-pool rthin-pool)"
complete -c rthinctl -n "__fish_seen_subcommand_from status" -f -a "(__rthinctl_dm_names thin-pool rthin-pool thin rthin)"
complete -c rthinctl -l live -x -a "(__rthinctl_dm_names thin-pool rthin-pool)"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated man pages name only pages that exist, each has an
    /// EXIT STATUS section with a paragraph per code, and the completions
    /// offer no hidden command, unit letters rather than file names after
    /// --units, and pool names from device-mapper.
    #[test]
    fn generated_pages_and_completions_are_true() {
        let dir = std::env::temp_dir().join(format!("rthinctl-docs-{}", std::process::id()));
        generate_docs(&dir).unwrap();
        let man = dir.join("man8");
        let mut pages = 0;
        for e in std::fs::read_dir(&man).unwrap() {
            let page = std::fs::read_to_string(e.unwrap().path()).unwrap();
            pages += 1;
            for (i, _) in page.match_indices("(8)") {
                let start = page[..i]
                    .rfind(|c: char| c.is_whitespace())
                    .map_or(0, |s| s + 1);
                let name = page[start..i]
                    .trim_start_matches("\\fB")
                    .replace("\\-", "-");
                assert!(
                    man.join(format!("{name}.8")).exists(),
                    "{name}(8) is listed but not generated"
                );
            }
            assert!(
                page.contains(".SH \"EXIT STATUS\"\n.TP\n0\nsuccess\n.TP\n1\n"),
                "{page}"
            );
            assert!(page.contains(".TP\n6\n"), "{page}");
        }
        assert!(pages > 10, "{pages} pages");
        let comp = dir.join("completions");
        for f in ["rthinctl.bash", "_rthinctl", "rthinctl.fish"] {
            let c = std::fs::read_to_string(comp.join(f)).unwrap();
            assert!(!c.contains("generate-docs"), "{f} offers generate-docs");
            // The about text of the hidden underscore aliases.
            assert!(!c.contains("Alias of"), "{f} offers a hidden alias");
        }
        let bash = std::fs::read_to_string(comp.join("rthinctl.bash")).unwrap();
        let units = bash.find("--units)").unwrap();
        let case = &bash[units..units + bash[units..].find(";;").unwrap()];
        assert!(
            !case.contains("compgen -f") && case.contains("h b s k"),
            "{case}"
        );
        assert!(
            bash.contains("dmsetup ls --target") && bash.contains("complete -F _rthinctl_names")
        );
        // Each command is offered the global flags it honours, no others.
        let dump = bash.find("rthinctl__subcmd__meta__subcmd__dump)").unwrap();
        let opts = bash[dump..].lines().nth(1).unwrap();
        assert_eq!(opts.trim(), r#"opts="-m -h --metadata-snap --help""#);
        let zsh = std::fs::read_to_string(comp.join("_rthinctl")).unwrap();
        assert!(
            zsh.contains("':pool -- The pool:_rthinctl_pools'"),
            "zsh: no pool names"
        );
        assert!(
            zsh.contains(":_rthinctl_devs'"),
            "zsh: no device names for status"
        );
        let defined = zsh.find("_rthinctl_pools() {").unwrap();
        assert!(defined < zsh.rfind("if [ \"$funcstack[1]\"").unwrap());
        let fish = std::fs::read_to_string(comp.join("rthinctl.fish")).unwrap();
        assert!(fish.contains("__rthinctl_dm_names thin-pool rthin-pool"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
