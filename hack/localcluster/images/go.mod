module gpu-scheduler.local/node-images

go 1.24.0
