"""The five systems, one readable file each, built on the structure layer and the backbones."""
