module wrap120

go 1.26
