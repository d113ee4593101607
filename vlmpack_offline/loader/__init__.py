"""Online loader: one pack from ``pretrain-*.tar`` becomes varlen model inputs."""
