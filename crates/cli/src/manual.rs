//! `haul completions` and `haul man`: shell completions and manual pages
//! generated from the same clap definitions the commands parse with, so
//! they never disagree with the flags.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, ManArgs};
use crate::exit;

pub fn completions(a: CompletionsArgs) -> i32 {
    clap_complete::generate(a.shell, &mut Cli::command(), "haul", &mut std::io::stdout());
    exit::OK
}

pub fn man(a: ManArgs) -> i32 {
    let cmd = Cli::command();
    let Some(dir) = a.out else {
        return match clap_mangen::Man::new(cmd).render(&mut std::io::stdout()) {
            Ok(()) => exit::OK,
            Err(e) => fail(&e.to_string()),
        };
    };
    let mut pages = vec![("haul".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        pages.push((format!("haul-{}", sub.get_name()), sub.clone()));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        let r = clap_mangen::Man::new(page)
            .title(name.clone())
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
