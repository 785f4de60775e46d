//! How a PE joins its job: [`JoinOptions`] reach its predefined teams.

use ferroshmem_actors::{init_alone_with, JoinOptions};

/// OpenSHMEM's options give the world and node teams its collective contract
/// (`TeamConfig::dest_ready`); the default options do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openshmem_options_give_the_predefined_teams_its_contract() {
    for (options, ready) in [
        (JoinOptions::default(), false),
        (JoinOptions::openshmem(), true),
    ] {
        let pe = init_alone_with(options).await.expect("a job of one PE");
        assert_eq!(pe.team_world().config().dest_ready, ready, "{options:?}");
        assert_eq!(pe.team_node().config().dest_ready, ready, "{options:?}");
        pe.finalize().await.expect("finalize");
    }
}
