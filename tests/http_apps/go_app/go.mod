module kneehttpapp

go 1.19
