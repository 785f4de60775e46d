//! How each launcher's environment is read. One test function, so that no other test of this
//! binary sees the environment change under it.

use std::net::{IpAddr, SocketAddr};

use ferroshmem_actors::launch_env::{LaunchEnv, RootSource};
use ferroshmem_runtime::config::Bind;
use ferroshmem_runtime::Error;

const ALL: &[&str] = &[
    "FERROSHMEM_RANK",
    "FERROSHMEM_SIZE",
    "FERROSHMEM_LOCAL_RANK",
    "FERROSHMEM_ROOT",
    "FERROSHMEM_SECRET",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_orte_hnp_uri",
    "FERROSHMEM_ROOT_ADDRESS",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_LAUNCH_NODE_IPADDR",
];

fn with_env(vars: &[(&str, &str)]) -> Result<Option<LaunchEnv>, Error> {
    for name in ALL {
        std::env::remove_var(name);
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    LaunchEnv::detect()
}

#[test]
fn every_launcher_is_recognised() {
    assert_eq!(with_env(&[]).unwrap(), None, "no launcher: in-process");

    let root: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let env = with_env(&[
        ("FERROSHMEM_RANK", "2"),
        ("FERROSHMEM_SIZE", "4"),
        ("FERROSHMEM_LOCAL_RANK", "2"),
        ("FERROSHMEM_ROOT", "127.0.0.1:4000"),
        ("FERROSHMEM_SECRET", "0aff"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        (env.launcher, env.rank, env.size, env.local_rank),
        ("ferroshmem run", 2, 4, 2)
    );
    assert_eq!(
        env.default_bind,
        Bind::Share,
        "ferroshmem run shares the CPUs"
    );
    assert_eq!(
        env.root,
        RootSource::Launcher {
            address: root,
            secret: vec![10, 255]
        }
    );

    let env = with_env(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "3"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("PMIX_NAMESPACE", "prterun-x-1@1"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!((env.launcher, env.rank, env.size), ("mpirun", 1, 3));
    assert_eq!(env.default_bind, Bind::None, "mpirun's own binding stays");
    match env.root {
        RootSource::Pe0ViaSocket(name) => {
            assert!(name.starts_with("ferroshmem-rendezvous-"), "{name}");
            assert!(name.ends_with("-ompi_prterun_x_1_1"), "{name}");
        }
        other => panic!("expected a rendezvous socket, got {other:?}"),
    }

    // With PMIx on one node: loopback, and the rendezvous socket to fall back on.
    let mpirun = [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("PMIX_NAMESPACE", "prterun-x-1@1"),
        ("PMIX_RANK", "0"),
    ];
    let one_node = [&mpirun[..], &[("OMPI_COMM_WORLD_LOCAL_SIZE", "4")]].concat();
    match with_env(&one_node).unwrap().unwrap().root {
        RootSource::Pe0ViaPmix {
            listen,
            socket: Some(name),
        } => {
            assert_eq!(listen, IpAddr::from([127, 0, 0, 1]));
            assert!(name.starts_with("ferroshmem-rendezvous-"), "{name}");
        }
        other => panic!("expected PMIx with a socket to fall back on, got {other:?}"),
    }
    // Across hosts: the address that faces mpirun's head node (its first address that is not
    // loopback), no socket; or the one given.
    let head = [
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        (
            "OMPI_MCA_orte_hnp_uri",
            "5.0;tcp://127.0.0.1,198.51.100.7:4000",
        ),
    ];
    let across = [&mpirun[..], &head[..]].concat();
    let facing = ferroshmem_actors::routes::source_towards("198.51.100.7:4000".parse().unwrap());
    match (with_env(&across), facing) {
        (Ok(Some(env)), Some(ip)) => assert_eq!(
            env.root,
            RootSource::Pe0ViaPmix {
                listen: ip,
                socket: None
            }
        ),
        // No route out of this machine: PE 0 cannot tell, and says what to set.
        (Err(Error::Config(why)), None) => assert!(why.contains("FERROSHMEM_ROOT_ADDRESS")),
        other => panic!("expected PMIx only, facing {facing:?}: {other:?}"),
    }
    let chosen = [&across[..], &[("FERROSHMEM_ROOT_ADDRESS", "10.1.2.3")]].concat();
    assert_eq!(
        with_env(&chosen).unwrap().unwrap().root,
        RootSource::Pe0ViaPmix {
            listen: IpAddr::from([10, 1, 2, 3]),
            socket: None
        }
    );
    let srun = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_NUM_NODES", "2"),
        ("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.3"),
        ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
        ("PMIX_RANK", "0"),
    ];
    // srun's head node: the node srun ran on.
    let towards = ferroshmem_actors::routes::source_towards("127.0.0.3:9".parse().unwrap());
    assert_eq!(
        with_env(&srun).unwrap().unwrap().root,
        RootSource::Pe0ViaPmix {
            listen: towards.expect("a route to loopback"),
            socket: None
        }
    );

    let env = with_env(&[
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_JOB_ID", "77"),
        ("FERROSHMEM_ROOT", "127.0.0.1:4000"),
        ("FERROSHMEM_SECRET", "01"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        (env.launcher, env.rank, env.size, env.local_rank),
        ("srun", 5, 8, 1)
    );
    assert_eq!(env.default_bind, Bind::None, "srun's own binding stays");
    assert_eq!(
        env.root,
        RootSource::Pe0AtAddress {
            address: root,
            secret: vec![1]
        }
    );

    // A batch script (no job step) is not a launched PE.
    assert_eq!(
        with_env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")]).unwrap(),
        None
    );

    for bad in [
        vec![
            ("FERROSHMEM_RANK", "4"),
            ("FERROSHMEM_SIZE", "4"),
            ("FERROSHMEM_ROOT", "127.0.0.1:1"),
            ("FERROSHMEM_SECRET", "00"),
        ],
        vec![("FERROSHMEM_RANK", "x"), ("FERROSHMEM_SIZE", "4")],
        vec![
            ("FERROSHMEM_RANK", "0"),
            ("FERROSHMEM_SIZE", "1"),
            ("FERROSHMEM_ROOT", "nowhere"),
            ("FERROSHMEM_SECRET", "00"),
        ],
        vec![
            ("FERROSHMEM_RANK", "0"),
            ("FERROSHMEM_SIZE", "1"),
            ("FERROSHMEM_ROOT", "127.0.0.1:1"),
        ],
        vec![
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMIX_NAMESPACE", "n"),
            ("FERROSHMEM_ROOT", "127.0.0.1:1"),
        ],
        // Across hosts without PMIx: no way to hand the root out.
        vec![
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("PMIX_NAMESPACE", "n"),
        ],
        // Across hosts with PMIx, and no way to tell which address faces the others.
        vec![
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("PMIX_NAMESPACE", "n"),
            ("PMIX_RANK", "0"),
        ],
        vec![
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMIX_NAMESPACE", "n"),
            ("PMIX_RANK", "0"),
            ("FERROSHMEM_ROOT_ADDRESS", "somewhere"),
        ],
    ] {
        assert!(
            matches!(with_env(&bad), Err(Error::Config(_))),
            "{bad:?} must be a configuration error"
        );
    }
    with_env(&[]).unwrap();
}
