//! Team configurations that could not be laid out, or that would move broadcasts in blocks
//! too small, are refused on every member with a typed error, and the parent team stays
//! usable.

use std::time::Duration;

use ferroshmem::{run_local, Error, TeamConfig, MIN_PIPELINE_BYTES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_team_config_is_refused_and_the_parent_stays_usable() {
    let job = run_local(2, |pe| async move {
        let world = pe.team_world();
        let huge = TeamConfig {
            eager_bytes: usize::MAX - 16,
            ..TeamConfig::default()
        };
        match world.split_strided_with(0, 1, 2, huge).await {
            Err(Error::InvalidArgument(why)) if why.contains("eager_bytes") => {}
            other => panic!("PE {}: {other:?}", pe.my_pe()),
        }
        let tiny_blocks = TeamConfig {
            pipeline_bytes: MIN_PIPELINE_BYTES - 1,
            ..TeamConfig::default()
        };
        match world.split_strided_with(0, 1, 2, tiny_blocks).await {
            Err(Error::InvalidArgument(why)) if why.contains("pipeline_bytes") => {}
            other => panic!("PE {}: {other:?}", pe.my_pe()),
        }
        let copy = world
            .split_strided_with(0, 1, 2, TeamConfig::default())
            .await?
            .expect("every PE is a member");
        copy.sync().await?;
        copy.destroy().await
    });
    let outcomes = tokio::time::timeout(Duration::from_secs(30), job)
        .await
        .expect("the job finishes")
        .expect("the job runs");
    for outcome in outcomes {
        outcome.unwrap();
    }
}
