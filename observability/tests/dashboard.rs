//! The Grafana dashboard (`observability/dashboards/ferroshmem.json`) and the README's metric
//! table against the single source of metric names ([`ferroshmem_observability::names`]):
//! the dashboard is valid JSON, its queries name only metrics that exist, it shows every
//! metric, and the README documents every metric. (`tests/prometheus.rs` in the workspace
//! root has a real Prometheus evaluate every query.)

use std::collections::BTreeSet;

use ferroshmem_observability::names::{self, series_names};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../dashboards/ferroshmem.json");
const README: &str = include_str!("../../README.md");

/// Every string under a key called `key`, anywhere in `v`.
fn strings_under<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                match child {
                    Value::String(s) if k == key => out.push(s),
                    _ => strings_under(child, key, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| strings_under(i, key, out)),
        _ => {}
    }
}

/// The `ferroshmem_*` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("ferroshmem_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        found.push(name);
    }
    found
}

/// The dashboard's PromQL: panel queries and template-variable queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    strings_under(dashboard, "expr", &mut out);
    strings_under(&dashboard["templating"], "definition", &mut out);
    out.into_iter().map(String::from).collect()
}

#[test]
fn the_dashboard_queries_only_metrics_that_exist_and_shows_them_all() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is valid JSON");
    let exported: BTreeSet<String> = names::ALL.iter().flat_map(series_names).collect();
    let queries = queries(&dashboard);
    assert!(queries.len() > 10, "{queries:?}");
    let mut used = BTreeSet::new();
    for q in &queries {
        let found = metric_names(q);
        assert!(!found.is_empty(), "a query on no ferroshmem metric: {q}");
        for name in found {
            assert!(exported.contains(&name), "{name} in `{q}` is not exported");
            used.insert(name);
        }
    }
    for m in names::ALL {
        assert!(
            series_names(m).iter().any(|s| used.contains(s)),
            "the dashboard shows no panel of {}",
            m.name
        );
    }
}

#[test]
fn the_dashboard_is_well_formed() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    assert_eq!(dashboard["uid"], "ferroshmem-overview");
    let panels = dashboard["panels"].as_array().expect("panels");
    let ids: BTreeSet<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for wanted in [
        "Traffic matrix",
        "Node traffic matrix",
        "Operations/s by kind",
        "Operation latency",
        "Heap used",
        "Errors/s",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "{wanted}: {titles:?}"
        );
    }
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let grid = &p["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24, "{} fits the grid", p["title"]);
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has a query", p["title"]);
        for t in targets.iter().chain([p]) {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
}

#[test]
fn the_readme_documents_every_metric() {
    for m in names::ALL {
        assert!(
            README.contains(&format!("`{}`", m.name)),
            "README.md does not document {}",
            m.name
        );
    }
    assert!(README.contains("observability/dashboards/ferroshmem.json"));
}
