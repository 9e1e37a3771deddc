//! `haul completions` and `haul man`: shell completions and manual pages
//! generated from the same clap definitions the commands parse with, so
//! they never disagree with the flags.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, ManArgs};
use crate::exit;

pub fn completions(a: CompletionsArgs) -> i32 {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "haul", &mut buf);
    match crate::out::write(&buf) {
        Ok(()) => exit::OK,
        Err(e) => fail(&format!("cannot write the completions: {e}")),
    }
}

pub fn man(a: ManArgs) -> i32 {
    let cmd = Cli::command();
    let Some(dir) = a.out else {
        let mut buf = Vec::new();
        return match clap_mangen::Man::new(cmd)
            .render(&mut buf)
            .and_then(|()| crate::out::write(&buf))
        {
            Ok(()) => exit::OK,
            Err(e) => fail(&e.to_string()),
        };
    };
    // The folder is made if it is not there (Debian has no
    // /usr/local/share/man/man1 until something puts a page in it).
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(&format!("cannot make {}: {e}", dir.display()));
    }
    let mut pages = vec![("haul".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        // Named as `man` finds them: haul-cp(1), its NAME line too.
        let name = format!("haul-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().display_name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        let r = clap_mangen::Man::new(page)
            .render(&mut buf)
            .and_then(|()| std::fs::File::create(&path)?.write_all(&buf));
        if let Err(e) = r {
            return fail(&format!("cannot write {}: {e}", path.display()));
        }
    }
    exit::OK
}

fn fail(msg: &str) -> i32 {
    eprintln!("haul: {msg}");
    exit::code(wire::ErrorCode::Other)
}
