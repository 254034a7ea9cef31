module kneehttpapp

go 1.19

require knee.test/hello v0.0.0

replace knee.test/hello => ../hello
