module kneeh2app

go 1.24

require knee.test/hello v0.0.0

replace knee.test/hello => ../hello
