"""CPU detection (leakaudit.envinfo): the /proc/cpuinfo parser on fake texts, the record in env.json."""

from __future__ import annotations

import json

from leakaudit.envinfo import BF16_FLAGS, cpu_info, cpu_tag, environment, isa_level, parse_cpuinfo


def _block(i: int, model: str, flags: str, core: int | None = None, physical: int = 0) -> str:
    lines = [f"processor\t: {i}", "vendor_id\t: GenuineIntel", f"model name\t: {model}"]
    if core is not None:
        lines += [f"physical id\t: {physical}", f"core id\t\t: {core}"]
    lines += [f"flags\t\t: {flags}", ""]
    return "\n".join(lines) + "\n"


SPR_FLAGS = ("fpu vme sse sse2 ssse3 fma cx16 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 "
             "avx512_fp16 amx_bf16 amx_tile amx_int8 hypervisor")
COOPER_FLAGS = "fpu sse sse2 fma avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 hypervisor"
SKYLAKE_FLAGS = "fpu sse sse2 fma avx avx2 avx512f avx512bw avx512vl"
HASWELL_FLAGS = "fpu sse sse2 fma avx avx2"


def test_sapphire_rapids_two_hyperthreads_on_one_core():
    # two logical processors that are hyperthreads of one core: 2 logical, 1 physical
    text = "".join(_block(i, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", SPR_FLAGS, core=0) for i in range(2))
    info = parse_cpuinfo(text)
    assert info["model_name"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert info["logical_processors"] == 2 and info["physical_cores"] == 1 and info["sockets"] == 1
    assert info["flags"] == {f: True for f in BF16_FLAGS}
    assert info["bf16_native"] is True
    assert isa_level(info["flags"]) == "amx"
    assert cpu_tag(info) == "intel-xeon-platinum-8481c-amx-2c"


def test_avx512_bf16_without_amx_is_native():
    text = "".join(_block(i, "Intel(R) Xeon(R) Processor", COOPER_FLAGS, core=i) for i in range(4))
    info = parse_cpuinfo(text)
    assert info["flags"]["avx512_bf16"] and not info["flags"]["amx_bf16"] and not info["flags"]["amx_tile"]
    assert info["bf16_native"] is True
    assert info["logical_processors"] == 4 and info["physical_cores"] == 4
    assert isa_level(info["flags"]) == "avx512bf16"
    assert cpu_tag(info) == "intel-xeon-processor-avx512bf16-4c"


def test_avx512_without_bf16_and_avx2_only_are_not_native():
    sky = parse_cpuinfo(_block(0, "Intel Xeon Gold 6148", SKYLAKE_FLAGS))
    assert sky["flags"]["avx512f"] and not sky["flags"]["avx512_bf16"] and sky["bf16_native"] is False
    assert isa_level(sky["flags"]) == "avx512"
    assert sky["physical_cores"] is None  # no core ids in the text (common in VMs)
    hsw = parse_cpuinfo(_block(0, "Intel Core i7-4770", HASWELL_FLAGS))
    assert hsw["flags"]["avx2"] and hsw["flags"]["fma"] and not hsw["flags"]["avx512f"]
    assert hsw["bf16_native"] is False and isa_level(hsw["flags"]) == "avx2"


def test_flag_names_match_whole_words_only():
    # 'avx512_bf16' must not be read from 'avx512_bf16x' nor 'amx_bf16' from 'amx_bf16_fake'
    info = parse_cpuinfo(_block(0, "X", "fpu avx512_bf16x amx_bf16_fake avx2"))
    assert info["flags"]["avx2"] and not info["flags"]["avx512_bf16"] and not info["flags"]["amx_bf16"]
    assert info["bf16_native"] is False


def test_empty_and_arm_texts():
    empty = parse_cpuinfo("")
    assert empty["model_name"] is None and empty["logical_processors"] is None
    assert not any(empty["flags"].values()) and empty["bf16_native"] is False
    arm = parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd bf16 i8mm\nCPU part\t: 0xd4f\n\n")
    assert arm["logical_processors"] == 1 and arm["bf16_native"] is False
    assert cpu_tag(arm).endswith("-baseline-1c")


def test_cpu_info_reads_the_given_file(tmp_path):
    fake = tmp_path / "cpuinfo"
    fake.write_text("".join(_block(i, "Intel(R) Xeon(R) Processor", COOPER_FLAGS, core=i) for i in range(2)))
    info = cpu_info(fake)
    assert info["model_name"] == "Intel(R) Xeon(R) Processor" and info["bf16_native"] is True
    assert isinstance(info["torch_threads"], int) and info["torch_threads"] >= 1
    assert isinstance(info["torch_capability"], str)  # e.g. 'AVX512', 'AVX2', 'DEFAULT'
    assert isinstance(info["cpu_count"], int) and info["tag"].startswith("intel-xeon-processor-avx512bf16-")
    missing = cpu_info(tmp_path / "nope")  # unreadable: no crash, flags all False
    assert not any(missing["flags"].values()) and missing["bf16_native"] is False


def test_environment_records_the_cpu():
    env = environment(3)
    cpu = env["cpu"]
    for key in ("model_name", "logical_processors", "physical_cores", "cpu_count", "usable_cpus", "torch_threads",
                "torch_capability", "flags", "bf16_native", "tag"):
        assert key in cpu
    assert set(cpu["flags"]) == set(BF16_FLAGS)
    assert env["seed"] == 3
    json.dumps(env)  # env.json must stay plain JSON
