"""What this host has: GPUs (through NVML), memory, disk."""
