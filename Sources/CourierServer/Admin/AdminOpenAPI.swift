/// The admin API's OpenAPI 3 document, served at `/openapi.json`: the
/// file `Admin/openapi.json` beside this one, compiled in; the committed
/// docs/openapi.json is the same text (a test compares them).
enum AdminOpenAPI {
    static let document = String(decoding: PackageResources.openapi_json, as: UTF8.self)
}
