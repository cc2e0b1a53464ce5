//! `TAGALLOC_CUDA_REGIONS`: `plain`, `vmm` or nothing; any other value is reported in one line
//! naming the variable, the value, what is accepted and the default used.

use tagalloc_cuda::{DeviceConfig, Regions};
use tagalloc_cuda_pluggable::config_for;

#[test]
fn accepted_values_choose_the_regions_silently() {
    assert_eq!(config_for(None), (DeviceConfig::VMM, None));
    assert_eq!(config_for(Some("")), (DeviceConfig::VMM, None));
    assert_eq!(config_for(Some("vmm")), (DeviceConfig::VMM, None));
    let (plain, said) = config_for(Some("plain"));
    assert_eq!((plain.regions, said), (Regions::PLAIN, None));
}

#[test]
fn a_malformed_value_is_one_line_and_the_default() {
    let (config, said) = config_for(Some("plane"));
    assert_eq!(config, DeviceConfig::VMM);
    let said = said.expect("a report");
    assert_eq!(
        said,
        "tagalloc: TAGALLOC_CUDA_REGIONS is neither \"plain\" nor \"vmm\" but \"plane\"; the \
         default is used: vmm (virtual-memory growth)"
    );
    assert!(!said.contains('\n'));
}
