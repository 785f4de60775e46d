//! Which NIC handler services the network path, from `FERROSHMEM_IBGDA_NIC_HANDLER`:
//! `cpu` (a handler task and the fabric), `gpu` (a ConnectX NIC reads the queues itself;
//! every PE must be able to, or the set-up fails saying what is missing), `auto` or unset
//! (`gpu` when every PE of the job has a usable mlx5 device with DevX, else `cpu`, logging
//! which and why).

use ferroshmem_runtime::{Error, Exchange, Result};

/// The variable that picks the handler.
pub const HANDLER_VAR: &str = "FERROSHMEM_IBGDA_NIC_HANDLER";
/// The control-plane group of the handlers' agreement.
const AGREE_GROUP: u64 = 0x4E49_4347_0000_0002;

/// The handler asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// `gpu` where every PE can, else `cpu`.
    Auto,
    /// The `cpu` handler.
    Cpu,
    /// The `gpu` handler, or a configuration error.
    Gpu,
}

/// The handler a value of [`HANDLER_VAR`] asks for (`None`: unset).
pub(crate) fn parse(value: Option<&str>) -> Result<Wanted> {
    match value {
        None | Some("") | Some("auto") => Ok(Wanted::Auto),
        Some("cpu") => Ok(Wanted::Cpu),
        Some("gpu") => Ok(Wanted::Gpu),
        Some(other) => Err(Error::Config(format!(
            "{HANDLER_VAR}={other}: expected auto, cpu or gpu"
        ))),
    }
}

/// The handler the environment asks for.
pub(crate) fn wanted() -> Result<Wanted> {
    parse(std::env::var(HANDLER_VAR).ok().as_deref())
}

/// This PE's choice: the NIC `probe` opens for `gpu` (its error for an explicit `gpu`), or
/// `None` for `cpu` (an `auto` whose probe failed logs why).
pub(crate) fn choose<T>(wanted: Wanted, probe: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
    match wanted {
        Wanted::Cpu => Ok(None),
        Wanted::Gpu => probe().map(Some),
        Wanted::Auto => match probe() {
            Ok(nic) => Ok(Some(nic)),
            Err(why) => {
                tracing::info!(%why, "NIC handler: auto chose cpu (the gpu handler cannot run here)");
                Ok(None)
            }
        },
    }
}

/// Whether every PE chose `gpu`, from each one's choice (`can`): collective over the
/// control plane. An explicit `gpu` that another PE cannot follow is a configuration error
/// naming those PEs.
pub(crate) async fn agree(
    wanted: Wanted,
    can: bool,
    exchange: &dyn Exchange,
    me: usize,
    n: usize,
) -> Result<bool> {
    let all = exchange
        .exchange(AGREE_GROUP, me, n, vec![u8::from(can)])
        .await?;
    let unable: Vec<usize> = (0..n)
        .filter(|pe| all.get(*pe).and_then(|b| b.first()) != Some(&1))
        .collect();
    match (unable.is_empty(), wanted) {
        (true, _) => Ok(can),
        (false, Wanted::Gpu) => Err(Error::Config(format!(
            "{HANDLER_VAR}=gpu: PEs {unable:?} cannot run the gpu NIC handler (see their logs)"
        ))),
        (false, _) => {
            if can {
                tracing::info!(
                    ?unable,
                    "NIC handler: cpu, since some PEs cannot run the gpu handler"
                );
            }
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devx::setup::{probe, NicLayout};
    use crate::network::queues::{NCQES, NWQES};

    /// A control plane whose other members announce `others` (member `me` gets its own).
    #[derive(Debug)]
    struct Fixed {
        others: Vec<Vec<u8>>,
    }

    impl Exchange for Fixed {
        fn exchange(
            &self,
            _group: u64,
            index: usize,
            size: usize,
            payload: Vec<u8>,
        ) -> ferroshmem_runtime::ExchangeFuture<'_> {
            let mut all = self.others.clone();
            all.insert(index, payload);
            all.truncate(size);
            Box::pin(async move { Ok(all) })
        }
    }

    fn agreed(wanted: Wanted, can: bool, others: &[u8]) -> Result<bool> {
        let fixed = Fixed {
            others: others.iter().map(|b| vec![*b]).collect(),
        };
        futures::executor::block_on(agree(wanted, can, &fixed, 0, others.len() + 1))
    }

    #[test]
    fn the_gpu_handler_runs_only_where_every_pe_can() {
        assert!(agreed(Wanted::Auto, true, &[1, 1]).unwrap());
        assert!(agreed(Wanted::Gpu, true, &[1, 1]).unwrap());
        assert!(
            !agreed(Wanted::Auto, true, &[1, 0]).unwrap(),
            "auto falls back together"
        );
        assert!(!agreed(Wanted::Auto, false, &[1, 1]).unwrap());
        assert!(!agreed(Wanted::Cpu, false, &[0, 0]).unwrap());
        match agreed(Wanted::Gpu, true, &[1, 0]) {
            Err(Error::Config(why)) => assert!(why.contains("[2]"), "names the PE: {why}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        assert!(agreed(Wanted::Auto, true, &[]).unwrap(), "a one-PE job");
    }

    #[test]
    fn the_variable_s_values_parse_and_others_are_refused() {
        assert_eq!(parse(None).unwrap(), Wanted::Auto);
        assert_eq!(parse(Some("auto")).unwrap(), Wanted::Auto);
        assert_eq!(parse(Some("cpu")).unwrap(), Wanted::Cpu);
        assert_eq!(parse(Some("gpu")).unwrap(), Wanted::Gpu);
        assert!(matches!(parse(Some("nic")), Err(Error::Config(_))));
    }

    /// The real probe: here, with no ConnectX NIC (or without rdma-core), `gpu` must fail
    /// with a configuration error naming what is missing, and `auto` must fall back to `cpu`.
    #[test]
    fn without_a_usable_nic_gpu_is_a_config_error_and_auto_is_cpu() {
        let layout = NicLayout {
            nwqes: NWQES,
            ncqes: NCQES,
        };
        let wanted = parse(Some("gpu")).unwrap();
        match choose(wanted, || probe(layout)) {
            Err(Error::Config(why)) => {
                eprintln!("gpu refused as expected: {why}");
                assert!(
                    why.contains("rdma-core")
                        || why.contains("mlx5")
                        || why.contains("RDMA device"),
                    "the error names what is missing: {why}"
                );
            }
            Ok(Some(nic)) => {
                eprintln!("skipping: this machine has a usable mlx5 device ({nic:?})");
                return;
            }
            other => panic!("expected a configuration error, got {other:?}"),
        }
        assert!(choose(Wanted::Auto, || probe(layout)).unwrap().is_none());
        assert!(
            choose(Wanted::Cpu, || -> Result<()> { panic!("cpu never probes") })
                .unwrap()
                .is_none()
        );
    }
}
