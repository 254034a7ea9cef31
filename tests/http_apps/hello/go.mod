module knee.test/hello

go 1.19
