"""The krew package of the kubectl plugin: `package` builds the archive krew downloads and
renders the manifest `gpu-scheduler.yaml` with the archive's sha256."""
