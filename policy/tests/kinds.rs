//! The drafter kinds: names, the dispatch matrix, per-kind constants.

mod common;

use common::*;
use policy::resolve::StepKind;
use policy::{DeclarationSource, Declared, DrafterKind, Width};

#[test]
fn every_kind_round_trips_through_its_name_and_unknown_names_list_the_kinds() {
    for k in DrafterKind::ALL {
        assert_eq!(k.as_str().parse::<DrafterKind>().unwrap(), k);
        assert_eq!(k.to_string(), k.as_str());
        assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        assert_eq!(serde_json::from_str::<DrafterKind>(&format!("\"{k}\"")).unwrap(), k);
    }
    let e = "eagle".parse::<DrafterKind>().unwrap_err().to_string();
    assert!(e.contains("eagle") && e.contains("ngram, layerskip, draft-model, dflash, mtp, suffix"), "{e}");
}

/// Which step decides for each kind, given a declaration, a measured entry,
/// both, or neither: the kinds' dispatch matrix.
#[test]
fn the_kinds_dispatch_matrix() {
    use DeclarationSource as D;
    use StepKind::{Declared as Decl, Default as Def, Table as Tab};
    // kind, declaration source, decider with: (nothing, declaration, entry, declaration + entry)
    let matrix = [
        (DrafterKind::Ngram, D::None, [Def, Def, Tab, Tab]),
        (DrafterKind::Layerskip, D::None, [Def, Def, Tab, Tab]),
        (DrafterKind::DraftModel, D::DrafterModel, [Def, Decl, Tab, Decl]),
        (DrafterKind::Dflash, D::DrafterModel, [Def, Decl, Tab, Decl]),
        (DrafterKind::Mtp, D::Target, [Def, Decl, Tab, Decl]),
        (DrafterKind::Suffix, D::None, [Def, Def, Tab, Tab]),
    ];
    assert_eq!(matrix.len(), DrafterKind::ALL.len(), "every kind is in the matrix");
    for (kind, source, deciders) in matrix {
        assert_eq!(kind.declaration_source(), source, "{kind}");
        let with_entry = table(&[entry(kind.as_str(), "cpu:x86_64-avx2", "q4_1", "6", FP)]);
        let cases = [(false, false), (true, false), (false, true), (true, true)];
        for ((declares, measured), want) in cases.into_iter().zip(deciders) {
            let mut i = In::new(kind, "q4_1");
            if declares {
                i.declared = Declared::Width { width: Width::new(9).unwrap(), evidence: "test: declared 9".into() };
            }
            let t = if measured { with_entry.clone() } else { empty() };
            let r = i.resolve(&t).unwrap();
            assert_eq!(decided(&r), want, "{kind} declares={declares} measured={measured}: {r:?}");
            let want_width = match want {
                Decl => 9,
                Tab => 6,
                _ => kind.default_width().get(),
            };
            assert_eq!(r.width.map(Width::get), Some(want_width), "{kind} declares={declares} measured={measured}");
            // The override beats every one of them.
            i.flag = Some("2");
            let r = i.resolve(&t).unwrap();
            assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Flag, Some(2)));
        }
    }
}

#[test]
fn per_kind_constants_apply_when_no_entry_matches() {
    // A copy of each constant: changing one must change this test too.
    let constants = [
        (DrafterKind::Ngram, 4),
        (DrafterKind::Layerskip, 4),
        (DrafterKind::DraftModel, 4),
        (DrafterKind::Dflash, 7),
        (DrafterKind::Mtp, 1),
        (DrafterKind::Suffix, 4),
    ];
    assert_eq!(constants.len(), DrafterKind::ALL.len());
    // Entries exist, but for other keys: another device, quant and kind.
    let t = table(&[
        entry("ngram", "cpu:x86_64-avx512vnni", "q4_1", "6", FP),
        entry("ngram", "cpu:x86_64-avx2", "q8_0", "6", FP),
        entry("layerskip", "cuda:sm_90", "q4_1", "6", FP),
    ]);
    for (kind, n) in constants {
        assert_eq!(kind.default_width().get(), n, "{kind}");
        let r = In::new(kind, "q4_1").resolve(&t).unwrap();
        assert_eq!(r.width.map(Width::get), Some(n), "{kind}");
        assert_eq!(decided(&r), StepKind::Default);
        assert_eq!(
            r.width_from,
            format!(
                "per-kind default {n}: no measurement for {kind} on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads"
            )
        );
    }
}
