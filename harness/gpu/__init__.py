"""The GPU side: NVML, clock policies, telemetry, peaks, CUDA libraries."""
