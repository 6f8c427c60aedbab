package tool

// argumentSeeds probe the edges of the common keywords: integers written
// with fractions and exponents, numbers at, above and just beyond bounds,
// beyond every float64, enums and consts of every kind.
var argumentSeeds = []string{
	`{"s":"ab"}`, `{"s":"a"}`, `{"s":"abcde"}`, `{"s":"é😀"}`, `{"s":"ab","e":"a"}`, `{"s":"ab","e":2.50}`,
	`{"s":"ab","e":[1.0]}`, `{"s":"ab","e":{"k":1e0}}`, `{"s":"ab","e":"c"}`, `{"s":"ab","e":null}`,
	`{"s":"ab","se":"x"}`, `{"s":"ab","se":"z"}`, `{"s":"ab","c":{"k":[1,"2"]}}`, `{"s":"ab","c":{"k":[1,2]}}`,
	`{"s":"ab","n":0.5}`, `{"s":"ab","n":0.49999999999999999999}`, `{"s":"ab","n":1e-500}`, `{"s":"ab","n":-1e-500}`,
	`{"s":"ab","n":1e300}`, `{"s":"ab","n":1.0000000000000000001e300}`, `{"s":"ab","n":1e400}`, `{"s":"ab","n":"1"}`,
	`{"s":"ab","i":-3}`, `{"s":"ab","i":-3.0}`, `{"s":"ab","i":-4}`, `{"s":"ab","i":9007199254740993}`,
	`{"s":"ab","i":9007199254740994}`, `{"s":"ab","i":1.5}`, `{"s":"ab","i":null}`, `{"s":"ab","i":0e-99999999999999999999}`,
	`{"s":"ab","a":[1,2,3]}`, `{"s":"ab","a":[]}`, `{"s":"ab","a":[1,2,3,4]}`, `{"s":"ab","a":[4]}`, `{"s":"ab","a":[1e-500]}`,
	`{"s":"ab","o":{"deep":true}}`, `{"s":"ab","o":{}}`, `{"s":"ab","o":{"deep":1,"x":2}}`, `{"s":"ab","m":{"a":"b","c":"dd"}}`,
	`{"s":"ab","f":1}`, `{"s":"ab","any":[1e400]}`, `{"s":"ab","zz":1}`, `{}`,
	`{"name":"x","count":1000}`, `{"name":"x","count":1000.5}`, `{"name":"x","count":1e3}`, `{"name":"x","count":1001}`,
	`{"name":"x","small":-128,"big":18446744073709551615,"ratio":1e308,"float":3.4e38}`, `{"name":"x","ratio":1e-400}`,
	`{"name":"x","levels":[1,2,3]}`, `{"name":"x","mode":"c"}`, `{"name":"x","fixed":[true]}`, `{"name":"x","inner":{"height":1}}`,
	`{"path":"p","limit":0}`, `{"path":"p","limit":2000}`, `{"path":"p","tags":["a","c"]}`, `{"path":"p","level":2.0}`,
}
