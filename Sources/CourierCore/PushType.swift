/// The values of the `apns-push-type` header that Apple defines today. A
/// request with any other value is refused (`InvalidPushType`): what a
/// provider sends is passed to the device, so it must be one of these.
public enum PushType: String, Sendable, Hashable, CaseIterable {
    case alert
    case background
    case location
    case voip
    case complication
    case fileprovider
    case mdm
    case liveactivity
    case pushtotalk
    case widgets
    case controls
}
