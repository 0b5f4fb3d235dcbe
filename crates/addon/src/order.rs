//! The order add-ons are applied in: every add-on after the ones it depends
//! on, ties in file order (Kahn's algorithm, always taking the first-declared
//! ready add-on).

use indexmap::IndexMap;

use talosprov_topology::model::Addon;

/// `addons` in apply order. Add-ons caught in a `depends_on` cycle (which
/// validation refuses) come last, in file order, so that the result always
/// holds every add-on once.
pub fn apply_order(addons: &IndexMap<String, Addon>) -> Vec<&Addon> {
    let mut waiting: Vec<usize> = addons
        .values()
        .map(|a| {
            a.depends_on
                .iter()
                .filter(|d| addons.contains_key(d.as_str()))
                .count()
        })
        .collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); addons.len()];
    for (i, a) in addons.values().enumerate() {
        for d in &a.depends_on {
            if let Some(j) = addons.get_index_of(d.as_str()) {
                dependents[j].push(i);
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..addons.len()).filter(|&i| waiting[i] == 0).collect();
    let mut done = vec![false; addons.len()];
    let mut out = Vec::with_capacity(addons.len());
    while let Some(i) = ready.pop_first() {
        done[i] = true;
        out.push(i);
        for &k in &dependents[i] {
            waiting[k] -= 1;
            if waiting[k] == 0 {
                ready.insert(k);
            }
        }
    }
    out.extend((0..addons.len()).filter(|&i| !done[i]));
    out.into_iter()
        .filter_map(|i| addons.get_index(i).map(|(_, a)| a))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::preset::spec::Phase;
    use talosprov_topology::model::AddonSource;

    fn addons(list: &[(&str, &[&str])]) -> IndexMap<String, Addon> {
        list.iter()
            .map(|(n, deps)| {
                let a = Addon {
                    name: (*n).into(),
                    pos: Default::default(),
                    preset: None,
                    source: AddonSource::Manifests(Vec::new()),
                    namespace: "default".into(),
                    namespace_labels: Default::default(),
                    phase: Phase::Cluster,
                    depends_on: deps.iter().map(|d| (*d).into()).collect(),
                };
                ((*n).to_owned(), a)
            })
            .collect()
    }

    fn names(list: &[(&str, &[&str])]) -> Vec<String> {
        let a = addons(list);
        apply_order(&a).iter().map(|a| a.name.clone()).collect()
    }

    #[test]
    fn dependencies_first_then_file_order() {
        assert_eq!(
            names(&[("gpu", &["cilium"]), ("approver", &[]), ("cilium", &[])]),
            ["approver", "cilium", "gpu"]
        );
        assert_eq!(
            names(&[("c", &["b"]), ("b", &["a"]), ("a", &[]), ("d", &["a"])]),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn a_cycle_still_lists_everyone_once() {
        assert_eq!(
            names(&[("a", &["b"]), ("b", &["a"]), ("c", &[])]),
            ["c", "a", "b"]
        );
    }
}
