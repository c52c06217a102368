"""The GPU's clocks, temperature and power, read at the start and end of every trial.

A GPU that has idled runs its first kernels at low clocks (an H200 starts at 345 MHz SM clock),
so a figure means little without the state it was taken in. NVIDIA: NVML through nvidia-ml-py
(`import pynvml`, the `gpu` extra). AMD: amdsmi where installed. Without either the state is
null and the reason is recorded once per result; reading the state never fails a job.

Which physical GPU measured (UUID, PCI bus, VBIOS, the power limit in force, the maximum clocks)
is read once per process by `GpuState.identity()`, for the result's provenance: "NVIDIA H200" names
a model, not the card, and a lowered power limit slows a kernel that draws the GPU to its cap.
"""

from __future__ import annotations

from fabench.platforms import PlatformName


class GpuState:
    """Reads one device's state; `source` says what reads it, `reason` why nothing can."""

    def __init__(self, platform: str):
        self.platform = platform
        self.source: str | None = None
        self.reason: str | None = None
        self._read = self._clock = self._identify = None
        try:
            if platform == PlatformName.CUDA:
                self._read, self._clock, self._identify, self.source = _nvml_reader()
            elif platform == PlatformName.ROCM:
                self._read, self._clock, self._identify, self.source = _amdsmi_reader()
            else:
                self.reason = f"no GPU (this host: {platform})"
        except Exception as err:  # a missing or broken library is recorded, never fatal
            self.reason = f"{type(err).__name__}: {err}"

    def read(self) -> dict | None:
        if self._read is None:
            return None
        try:
            return self._read()
        except Exception as err:
            return {"error": f"{type(err).__name__}: {err}"}

    def sm_clock(self) -> float | None:
        """The SM clock now (MHz), None where it cannot be read: what the warm-up watches between
        windows. One query only: reading power and temperature too idled the GPU long enough
        between windows to keep a power-capped kernel above the clock it settles at under load."""
        if self._clock is None:
            return None
        try:
            return self._clock()
        except Exception:
            return None

    def describe(self) -> dict:
        return {"source": self.source, "reason": self.reason}

    def identity(self) -> dict | None:
        """Which physical GPU torch uses (IDENTITY_KEYS, each None where unreadable); None on a CPU.
        Read once per process: the device does not change within one, and every result of the
        process then names the same card."""
        if not PlatformName.parse(self.platform).is_gpu:
            return None
        if self.platform not in _IDENTITY:
            try:
                readers = self._identify() if self._identify else _torch_identity()
            except Exception:  # not even torch can name its device: every field None
                readers = {}
            _IDENTITY[self.platform] = _fields(readers)
        return dict(_IDENTITY[self.platform])


# What identifies the GPU and the limits it measured under (provenance.gpu in a result).
IDENTITY_KEYS = ("uuid", "serial", "pci_bus_id", "name", "vbios", "power_limit_w", "default_power_limit_w",
                 "max_sm_clock_mhz", "max_mem_clock_mhz", "persistence_mode", "index")
_IDENTITY: dict[str, dict] = {}  # platform -> identity, read once per process


def _fields(readers: dict) -> dict:
    """Every identity key, each read in its own try: a query the driver or library lacks (serial
    on consumer cards, power on a MIG slice) leaves that field None and never fails a job."""
    found = {}
    for key in IDENTITY_KEYS:
        try:
            found[key] = readers[key]() if key in readers else None
        except Exception:
            found[key] = None
    return found


def _text(value) -> str | None:
    """NVML's char arrays come back as bytes from some calls (the PCI info's busId)."""
    value = value.decode() if isinstance(value, bytes) else value
    return str(value) if value not in (None, "", "N/A") else None


def _number(value) -> float | None:
    """A limit or clock as a number; amdsmi writes "N/A" for one it cannot read."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _torch_identity() -> dict:
    """Without NVML or amdsmi, what torch knows: UUID, PCI address and name of its device."""
    from fabench.measure.device.accelerator import here

    props = here().device_properties()

    def uuid() -> str | None:
        text = _text(getattr(props, "uuid", None))
        # NVML writes "GPU-<uuid>"; torch's CUDA uuid lacks the prefix (ROCm's is left as it is)
        return f"GPU-{text}" if text and here().name == PlatformName.CUDA and text[:4] not in ("GPU-", "MIG-") else text

    def pci_bus_id() -> str:  # NVML's spelling: domain:bus:device.function
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"

    return {"uuid": uuid, "pci_bus_id": pci_bus_id, "name": lambda: _text(props.name)}


# NVML's clock-event reasons that hold the clocks below what the load asks for (nvml.h's
# nvmlClocksEventReason* bits); idle, application-clock and sync-boost bits are not a slowdown.
SLOWDOWN_REASONS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                    0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}


def slowdown(state: dict | None) -> str | None:
    """What held the clocks down in a state read by GpuState, in words; None when nothing did."""
    reasons = (state or {}).get("clock_event_reasons")
    if not reasons:
        return None
    names = [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit]
    return ", ".join(names) or None


def _nvml_reader():
    import pynvml

    from fabench.measure.device.accelerator import named

    pynvml.nvmlInit()
    handle = _nvml_handle(pynvml, named("cuda").device_properties())

    def read() -> dict:
        state = {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        }
        try:  # why clocks are held down (power cap, thermal, idle), as NVML's bit mask
            state["clock_event_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except (AttributeError, pynvml.NVMLError):
            state["clock_event_reasons"] = None
        return state

    from fabench.gitinfo import package_version

    def sm_clock() -> float:
        return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)

    def identify() -> dict:  # power in mW, clocks in MHz
        return {
            "uuid": lambda: _text(pynvml.nvmlDeviceGetUUID(handle)),
            "serial": lambda: _text(pynvml.nvmlDeviceGetSerial(handle)),
            "pci_bus_id": lambda: _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
            "name": lambda: _text(pynvml.nvmlDeviceGetName(handle)),
            "vbios": lambda: _text(pynvml.nvmlDeviceGetVbiosVersion(handle)),
            "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
            "default_power_limit_w": lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0,
            "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "max_mem_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "persistence_mode": lambda: pynvml.nvmlDeviceGetPersistenceMode(handle) == pynvml.NVML_FEATURE_ENABLED,
            "index": lambda: pynvml.nvmlDeviceGetIndex(handle),
        }

    return read, sm_clock, identify, f"NVML (nvidia-ml-py {package_version('nvidia-ml-py')})"


def _nvml_handle(pynvml, props):
    """The NVML handle of the device torch uses: NVML counts all GPUs, CUDA_VISIBLE_DEVICES does not."""
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
        except pynvml.NVMLError:
            pass
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{device:02x}.0")
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def _amdsmi_reader():
    import amdsmi

    amdsmi.amdsmi_init()
    handles = amdsmi.amdsmi_get_processor_handles()
    if not handles:
        raise RuntimeError("amdsmi sees no GPU")
    handle = _amdsmi_handle(amdsmi, handles)

    def read() -> dict:
        gfx = amdsmi.amdsmi_get_clock_info(handle, amdsmi.AmdSmiClkType.GFX)
        mem = amdsmi.amdsmi_get_clock_info(handle, amdsmi.AmdSmiClkType.MEM)
        power = amdsmi.amdsmi_get_power_info(handle)
        temp = amdsmi.amdsmi_get_temp_metric(handle, amdsmi.AmdSmiTemperatureType.HOTSPOT,
                                             amdsmi.AmdSmiTemperatureMetric.CURRENT)
        watts = power.get("current_socket_power")
        if watts in (None, "N/A"):
            watts = power.get("average_socket_power")
        return {"sm_clock_mhz": gfx.get("clk"), "mem_clock_mhz": mem.get("clk"), "temperature_c": temp,
                "power_w": watts, "clock_event_reasons": None}

    def sm_clock() -> float | None:
        return amdsmi.amdsmi_get_clock_info(handle, amdsmi.AmdSmiClkType.GFX).get("clk")

    def identify() -> dict:  # power caps in microwatts (Linux), clocks in MHz; no persistence mode
        def cap(*keys: str) -> float | None:
            info = amdsmi.amdsmi_get_power_cap_info(handle)
            value = _number(next((info[key] for key in keys if key in info), None))
            return value / 1e6 if value is not None else None

        def max_clock(kind) -> float | None:
            return _number(amdsmi.amdsmi_get_clock_info(handle, kind).get("max_clk"))

        return {
            "uuid": lambda: _text(amdsmi.amdsmi_get_gpu_device_uuid(handle)),
            "serial": lambda: _text(amdsmi.amdsmi_get_gpu_asic_info(handle).get("asic_serial")),
            "pci_bus_id": lambda: _text(amdsmi.amdsmi_get_gpu_device_bdf(handle)),
            "name": lambda: _text(amdsmi.amdsmi_get_gpu_asic_info(handle).get("market_name")),
            "vbios": lambda: _text(amdsmi.amdsmi_get_gpu_vbios_info(handle).get("version")),
            "power_limit_w": lambda: cap("power_cap"),
            "default_power_limit_w": lambda: cap("default_power_cap", "power_cap_default"),  # older amdsmi
            "max_sm_clock_mhz": lambda: max_clock(amdsmi.AmdSmiClkType.GFX),
            "max_mem_clock_mhz": lambda: max_clock(amdsmi.AmdSmiClkType.MEM),
            "index": lambda: handles.index(handle),
        }

    return read, sm_clock, identify, "amdsmi"


def _amdsmi_handle(amdsmi, handles):
    """amdsmi lists every GPU; the one torch uses is matched by its PCI bus (first one otherwise)."""
    from fabench.measure.device.accelerator import named

    bus = getattr(named("rocm").device_properties(), "pci_bus_id", None)
    for handle in handles:
        try:
            if bus is not None and int(amdsmi.amdsmi_get_gpu_device_bdf(handle).split(":")[1], 16) == bus:
                return handle
        except Exception:  # an unreadable BDF: try the next GPU
            continue
    return handles[0]
