//! Where libfabric cannot be loaded, opening the fabric fails with a configuration error that
//! says what to install. A binary of its own: it changes the environment.

use ferroshmem_net::{Fabric, FabricOptions, Library, LIBRARY_VAR};
use ferroshmem_runtime::Error;

#[test]
fn a_missing_library_is_a_config_error_saying_what_to_install() {
    std::env::set_var(LIBRARY_VAR, "/nonexistent/libfabric.so.1");
    let expect = |what: &str, e: Option<Error>| match e {
        Some(Error::Config(why)) => {
            assert!(why.contains("apt-get install libfabric1"), "{what}: {why}");
            assert!(why.contains(LIBRARY_VAR), "{what}: {why}");
        }
        other => panic!("{what}: {other:?}"),
    };
    expect("load", Library::load().err());
    expect(
        "open",
        Fabric::open(&FabricOptions::default(), |_| {}).err(),
    );
}
