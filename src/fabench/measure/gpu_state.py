"""The GPU's clocks, temperature and power, read at the start and end of every trial.

A GPU that has idled runs its first kernels at low clocks (an H200 starts at 345 MHz SM clock),
so a figure means little without the state it was taken in. NVIDIA: NVML through nvidia-ml-py
(`import pynvml`, the `gpu` extra). AMD: amdsmi where installed. Without either the state is
null and the reason is recorded once per result; reading the state never fails a job.
"""

from __future__ import annotations


class GpuState:
    """Reads one device's state; `source` says what reads it, `reason` why nothing can."""

    def __init__(self, platform: str):
        self.source: str | None = None
        self.reason: str | None = None
        self._read = self._clock = None
        try:
            if platform == "cuda":
                self._read, self._clock, self.source = _nvml_reader()
            elif platform == "rocm":
                self._read, self._clock, self.source = _amdsmi_reader()
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
    import torch

    pynvml.nvmlInit()
    handle = _nvml_handle(pynvml, torch.cuda.get_device_properties(torch.cuda.current_device()))

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

    from fabench.measure.provenance import package_version

    def sm_clock() -> float:
        return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)

    return read, sm_clock, f"NVML (nvidia-ml-py {package_version('nvidia-ml-py')})"


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

    return read, sm_clock, "amdsmi"


def _amdsmi_handle(amdsmi, handles):
    """amdsmi lists every GPU; the one torch uses is matched by its PCI bus (first one otherwise)."""
    import torch

    bus = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "pci_bus_id", None)
    for handle in handles:
        try:
            if bus is not None and int(amdsmi.amdsmi_get_gpu_device_bdf(handle).split(":")[1], 16) == bus:
                return handle
        except Exception:  # an unreadable BDF: try the next GPU
            continue
    return handles[0]
