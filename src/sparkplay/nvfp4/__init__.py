"""NVFP4 (FP4 E2M1 values, FP8 E4M3 block scales, an F32 global scale) for the MTP overlay."""
