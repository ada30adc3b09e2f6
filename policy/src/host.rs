//! The host's CPU class: the processor a measurement was made on, as part of
//! the policy key.
//!
//! The class is derived from the CPU's signature in `/proc/cpuinfo`: on x86
//! the vendor, family and model (not the stepping or microcode: those change
//! with a server's firmware, not with its core), on Arm the implementer and
//! part. Where the project knows the microarchitecture of a signature it is
//! spelled by that name (`amd-zen4`, `intel-sapphire-rapids`,
//! `arm-neoverse-v2`); otherwise by the raw signature (`amd-family25-model200`,
//! `arm-0x41-0xd99`). A raw spelling of a signature the project later names
//! reads back as the name ([`HostClass::parse`]), so a table written before
//! the name was known keeps matching.
//!
//! Why this is in the key: two CPUs of one kernel family (Sapphire Rapids
//! and Zen 5 both run `avx512vnni`) verify at very different costs (a W = 1
//! pass at 2,048 positions took 12–13 ms on one and 5 ms on the other,
//! docs/performance.md), so a width measured on one is not a measurement of
//! the other.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// Largest `/proc/cpuinfo` read (a 512-CPU host writes about 1 MiB; only the
/// first processor's block is used).
pub const MAX_CPUINFO_BYTES: u64 = 4 << 20;

/// The value of the first `key : value` line of `cpuinfo` whose key is `key`.
pub fn cpuinfo_field<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim()).filter(|v| !v.is_empty())
    })
}

/// The CPU's signature as the host identity records it: `AuthenticAMD family
/// 26 model 2 stepping 1, microcode 0xb002116` on x86, `implementer 0x41
/// architecture 8 variant 0x3 part 0xd0c revision 1` on Arm; `None` when
/// `cpuinfo` has neither.
pub fn cpu_signature(cpuinfo: &str) -> Option<String> {
    let f = |k: &str| cpuinfo_field(cpuinfo, k);
    let x86 = [("", "vendor_id"), ("family ", "cpu family"), ("model ", "model"), ("stepping ", "stepping")];
    let arm = [
        ("implementer ", "CPU implementer"),
        ("architecture ", "CPU architecture"),
        ("variant ", "CPU variant"),
        ("part ", "CPU part"),
        ("revision ", "CPU revision"),
    ];
    for fields in [&x86[..], &arm[..]] {
        let parts: Vec<String> = fields.iter().filter_map(|(label, k)| f(k).map(|v| format!("{label}{v}"))).collect();
        if !parts.is_empty() {
            let mut sig = parts.join(" ");
            if let Some(m) = f("microcode") {
                sig.push_str(&format!(", microcode {m}"));
            }
            return Some(sig);
        }
    }
    None
}

/// The CPU class of a host: a stable lowercase name (`[a-z0-9-]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostClass(String);

/// The microarchitectures the project names, by (vendor, family, model
/// range). Models within one range share the core (server, desktop and
/// mobile parts of one generation).
const X86_NAMES: &[(&str, u32, u32, u32, &str)] = &[
    ("amd", 23, 0x00, 0x2f, "zen"),
    ("amd", 23, 0x30, 0xaf, "zen2"),
    ("amd", 25, 0x00, 0x0f, "zen3"),
    ("amd", 25, 0x10, 0x1f, "zen4"),
    ("amd", 25, 0x20, 0x5f, "zen3"),
    ("amd", 25, 0x60, 0xaf, "zen4"),
    ("amd", 26, 0x00, 0x7f, "zen5"),
    ("intel", 6, 85, 85, "skylake-sp"),
    ("intel", 6, 106, 106, "ice-lake-sp"),
    ("intel", 6, 108, 108, "ice-lake-sp"),
    ("intel", 6, 143, 143, "sapphire-rapids"),
    ("intel", 6, 207, 207, "emerald-rapids"),
    ("intel", 6, 173, 174, "granite-rapids"),
    ("intel", 6, 175, 175, "sierra-forest"),
    ("intel", 6, 151, 151, "alder-lake"),
    ("intel", 6, 154, 154, "alder-lake"),
    ("intel", 6, 183, 183, "raptor-lake"),
    ("intel", 6, 186, 186, "raptor-lake"),
    ("intel", 6, 191, 191, "raptor-lake"),
];

/// Arm cores the project names, by (implementer, part).
const ARM_NAMES: &[(u32, u32, &str)] = &[
    (0x41, 0xd0c, "neoverse-n1"),
    (0x41, 0xd40, "neoverse-v1"),
    (0x41, 0xd49, "neoverse-n2"),
    (0x41, 0xd4f, "neoverse-v2"),
    (0x41, 0xd84, "neoverse-v3"),
    (0x41, 0xd8e, "neoverse-n3"),
    (0xc0, 0xac3, "ampereone"),
];

fn vendor_word(vendor_id: &str) -> String {
    match vendor_id {
        "AuthenticAMD" => "amd".into(),
        "GenuineIntel" => "intel".into(),
        other => {
            let w: String =
                other.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
            if w.is_empty() { "x86".into() } else { w }
        }
    }
}

fn number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The value after `label ` in a signature's words.
fn after<'a>(words: &[&'a str], label: &str) -> Option<&'a str> {
    words.windows(2).find(|w| w[0] == label).map(|w| w[1].trim_end_matches(','))
}

impl HostClass {
    /// The class of an x86 CPU.
    pub fn x86(vendor_id: &str, family: u32, model: u32) -> HostClass {
        let vendor = vendor_word(vendor_id);
        let named =
            X86_NAMES.iter().find(|(v, f, lo, hi, _)| *v == vendor && *f == family && (*lo..=*hi).contains(&model));
        match named {
            Some((v, .., name)) => HostClass(format!("{v}-{name}")),
            None => HostClass(format!("{vendor}-family{family}-model{model}")),
        }
    }

    /// The class of an Arm CPU.
    pub fn arm(implementer: u32, part: u32) -> HostClass {
        match ARM_NAMES.iter().find(|(i, p, _)| *i == implementer && *p == part) {
            Some((.., name)) => HostClass(format!("arm-{name}")),
            None => HostClass(format!("arm-{implementer:#x}-{part:#x}")),
        }
    }

    /// The class of a signature as [`cpu_signature`] writes it (and records
    /// keep it); `None` when it names neither an x86 family and model nor an
    /// Arm implementer and part.
    pub fn from_signature(sig: &str) -> Option<HostClass> {
        let words: Vec<&str> = sig.split_whitespace().collect();
        if let (Some(i), Some(p)) = (after(&words, "implementer"), after(&words, "part")) {
            return Some(HostClass::arm(number(i)?, number(p)?));
        }
        let family = number(after(&words, "family")?)?;
        let model = number(after(&words, "model")?)?;
        Some(HostClass::x86(words.first()?, family, model))
    }

    /// This host's class, from `/proc/cpuinfo` (read with a size cap); the
    /// error says what was missing.
    pub fn this_host() -> Result<HostClass, String> {
        Self::from_cpuinfo_file(Path::new("/proc/cpuinfo"))
    }

    /// The class from a cpuinfo file (tests pass their own).
    pub fn from_cpuinfo_file(path: &Path) -> Result<HostClass, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut text = String::new();
        f.take(MAX_CPUINFO_BYTES).read_to_string(&mut text).map_err(|e| format!("{}: {e}", path.display()))?;
        let sig = cpu_signature(&text)
            .ok_or_else(|| format!("{} has no vendor_id/cpu family/model or CPU implementer/part", path.display()))?;
        HostClass::from_signature(&sig).ok_or_else(|| format!("the CPU signature {sig:?} names no family and model"))
    }

    /// A class as a table spells it: lowercase `[a-z0-9-]`, at most 64
    /// bytes. A raw signature the project now names reads as the name.
    pub fn parse(s: &str) -> Result<HostClass, String> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            return Err(format!(
                "{s:?} is not a host class: write the CPU's class as `runtime policy explain` prints it \
                 (e.g. amd-zen4, intel-sapphire-rapids, amd-family25-model200)"
            ));
        }
        // The raw spellings, canonicalized.
        let parts: Vec<&str> = s.split('-').collect();
        if let [vendor, fam, model] = parts.as_slice()
            && let (Some(f), Some(m)) = (fam.strip_prefix("family"), model.strip_prefix("model"))
            && let (Ok(f), Ok(m)) = (f.parse::<u32>(), m.parse::<u32>())
        {
            let vendor_id = match *vendor {
                "amd" => "AuthenticAMD",
                "intel" => "GenuineIntel",
                v => v,
            };
            return Ok(HostClass::x86(vendor_id, f, m));
        }
        if let ["arm", i, p] = parts.as_slice()
            && i.starts_with("0x")
            && p.starts_with("0x")
            && let (Some(i), Some(p)) = (number(i), number(p))
        {
            return Ok(HostClass::arm(i, p));
        }
        Ok(HostClass(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for HostClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for HostClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HostClass::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEN4: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n\
                        model name\t: AMD EPYC\nstepping\t: 1\nmicrocode\t: 0xa101148\n";
    const ZEN5: &str = "vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nstepping\t: 1\n";
    const SPR: &str = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nstepping\t: 8\n";
    const XEON_207: &str = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\nstepping\t: 2\n";
    const ARM: &str = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n\
                       CPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 1\n";

    fn class(cpuinfo: &str) -> String {
        HostClass::from_signature(&cpu_signature(cpuinfo).unwrap()).unwrap().to_string()
    }

    #[test]
    fn cpus_of_one_kernel_family_get_different_classes() {
        assert_eq!(class(ZEN4), "amd-zen4");
        assert_eq!(class(ZEN5), "amd-zen5");
        assert_eq!(class(SPR), "intel-sapphire-rapids");
        assert_eq!(class(XEON_207), "intel-emerald-rapids");
        assert_eq!(class(ARM), "arm-neoverse-v2");
    }

    #[test]
    fn an_unnamed_signature_is_spelled_raw_and_a_named_raw_spelling_reads_as_the_name() {
        let odd = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 200\n";
        assert_eq!(class(odd), "amd-family25-model200");
        assert_eq!(HostClass::parse("amd-family25-model200").unwrap().as_str(), "amd-family25-model200");
        assert_eq!(HostClass::parse("amd-family25-model17").unwrap().as_str(), "amd-zen4");
        assert_eq!(HostClass::parse("arm-0x41-0xd0c").unwrap().as_str(), "arm-neoverse-n1");
        assert_eq!(HostClass::parse("arm-0x41-0xd99").unwrap().as_str(), "arm-0x41-0xd99");
        for bad in ["", "AMD Zen4", "zen_4", &"x".repeat(65)] {
            assert!(HostClass::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_signature_is_the_identitys_and_the_stepping_does_not_move_the_class() {
        assert_eq!(cpu_signature(ZEN4).unwrap(), "AuthenticAMD family 25 model 17 stepping 1, microcode 0xa101148");
        let other_stepping = ZEN4.replace("stepping\t: 1", "stepping\t: 2");
        assert_eq!(class(&other_stepping), class(ZEN4));
        assert_eq!(cpu_signature("flags\t: fpu\n"), None);
    }

    #[test]
    fn a_cpuinfo_file_is_read_with_a_cap() {
        let dir = std::env::temp_dir().join(format!("policy-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("cpuinfo");
        // The fields past the cap are not read.
        let mut big = "x".repeat(MAX_CPUINFO_BYTES as usize);
        big.push_str("\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n");
        std::fs::write(&p, big).unwrap();
        assert!(HostClass::from_cpuinfo_file(&p).is_err());
        std::fs::write(&p, ZEN4).unwrap();
        assert_eq!(HostClass::from_cpuinfo_file(&p).unwrap().as_str(), "amd-zen4");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
