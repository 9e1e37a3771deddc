#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::datagram_receiver(data));
