module github.com/goddp/ddp

go 1.26
