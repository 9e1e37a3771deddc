//! Where `haul`'s log lines go and how many there are: `-v`, `-vv`, or
//! `HAUL_LOG`, always on stderr so stdout stays for `--json`. The S3
//! SDK's own lines (a region not found in instance metadata, say) only at
//! `-vv`: haul says what failed in its own words.

pub fn init(verbose: u8) {
    let level = match verbose {
        0 => "warn,aws_config=error,aws_smithy_runtime=error,aws_sdk_s3=error",
        1 => "info,aws_config=error,aws_smithy_runtime=error,aws_sdk_s3=error",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAUL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
