module kneeh2app

go 1.24
