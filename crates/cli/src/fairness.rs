//! `--fair` and `--background`: how a transfer shares its path with other
//! traffic (P-46), as Aspera's fair, fixed and low policies.

use clap::{Args, ValueEnum};

#[derive(Args, Clone, Copy, Debug, Default)]
pub struct ShareArgs {
    /// Share the path with other traffic: on (default) takes about half
    /// of a path another flow also wants and all of an idle one; off
    /// holds the rate found whatever else the path carries (dedicated
    /// paths only). Applies to the UDP channel and the TCP streams.
    #[arg(long, value_enum, default_value_t = FairArg::On, value_name = "on|off")]
    pub fair: FairArg,
    /// Yield to any other traffic, as LEDBAT does: a trickle while another
    /// flow wants the path, all of it when idle (backups, replicas).
    #[arg(long, conflicts_with = "fair")]
    pub background: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FairArg {
    #[default]
    On,
    Off,
}

impl ShareArgs {
    pub fn share(&self) -> rate::Share {
        match (self.background, self.fair) {
            (true, _) => rate::Share::Background,
            (false, FairArg::On) => rate::Share::Fair,
            (false, FairArg::Off) => rate::Share::Off,
        }
    }
}
