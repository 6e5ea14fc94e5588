/// The admin API's OpenAPI 3 document, served at `/openapi.json`; the
/// committed docs/openapi.json is this text (a test compares them).
enum AdminOpenAPI {
    static let document = #"""
        {
          "openapi": "3.0.3",
          "info": {
            "title": "Courier admin API",
            "version": "1",
            "description": "Courier's admin API: the inbox of notifications received, delivery-log lookup, status and health. See docs/admin-api.md."
          },
          "servers": [{"url": "http://127.0.0.1:8080"}],
          "components": {
            "securitySchemes": {
              "adminToken": {"type": "http", "scheme": "bearer", "description": "The admin token: the file admin-token in the data directory, printed in the start-up banner."}
            },
            "parameters": {
              "topic": {"name": "topic", "in": "query", "schema": {"type": "string"}, "description": "apns-topic"},
              "token": {"name": "token", "in": "query", "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2})+$"}, "description": "device token, hex"},
              "apnsID": {"name": "apns-id", "in": "query", "schema": {"type": "string"}},
              "team": {"name": "team", "in": "query", "schema": {"type": "string"}, "description": "the provider's team id"},
              "interface": {"name": "interface", "in": "query", "schema": {"type": "string", "enum": ["http2", "binary"]}},
              "kind": {"name": "kind", "in": "query", "schema": {"type": "string", "enum": ["notification", "broadcast", "channel", "other"]}, "description": "notification (a device token), broadcast (a channel's), channel (channel management), other"},
              "environment": {"name": "environment", "in": "query", "schema": {"type": "string", "enum": ["production", "sandbox"]}},
              "outcome": {"name": "outcome", "in": "query", "schema": {"type": "string"}, "description": "accepted, refused, or a reason (BadDeviceToken, ...); empty: no filter"},
              "since": {"name": "since", "in": "query", "schema": {"type": "number", "minimum": 0, "maximum": 253402300799}, "description": "seconds since 1970 (an ISO 8601 time is taken too)"},
              "until": {"name": "until", "in": "query", "schema": {"type": "number", "minimum": 0, "maximum": 253402300799}, "description": "seconds since 1970 (an ISO 8601 time is taken too)"},
              "after": {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 9007199254740991}, "description": "only entries with a larger sequence"},
              "limit": {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}}
            },
            "responses": {
              "Error": {
                "description": "An error, with a one-line message",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
              }
            },
            "schemas": {
              "Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string"}}}}
              },
              "Status": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}},
              "VirtualToken": {
                "type": "object", "required": ["token", "environment", "online", "registeredAt"],
                "properties": {
                  "token": {"type": "string"}, "environment": {"type": "string"}, "online": {"type": "boolean"},
                  "registeredAt": {"type": "string", "format": "date-time"},
                  "uninstalledAt": {"type": "string", "format": "date-time", "nullable": true}
                }
              },
              "App": {
                "type": "object", "required": ["bundleID", "teamID", "topics", "createdAt"],
                "properties": {
                  "bundleID": {"type": "string"}, "teamID": {"type": "string"}, "topics": {"type": "array", "items": {"type": "string"}},
                  "createdAt": {"type": "string", "format": "date-time"}
                }
              },
              "Team": {
                "type": "object", "required": ["id", "name", "createdAt", "apps", "authKeys"],
                "properties": {
                  "id": {"type": "string"}, "name": {"type": "string"}, "createdAt": {"type": "string", "format": "date-time"},
                  "apps": {"type": "array", "items": {"$ref": "#/components/schemas/App"}},
                  "authKeys": {"type": "array", "items": {
                    "type": "object", "required": ["keyID", "createdAt", "environments"],
                    "properties": {
                      "keyID": {"type": "string"}, "createdAt": {"type": "string", "format": "date-time"},
                      "revokedAt": {"type": "string", "format": "date-time"},
                      "environments": {"type": "array", "items": {"type": "string", "enum": ["production", "sandbox"]}},
                      "bundleIDs": {"type": "array", "items": {"type": "string"}, "description": "a topic-specific key's apps; absent for a team-scoped key"},
                      "usedByConsole": {"type": "boolean", "description": "true for the key the web console made to send its test pushes for the team"}
                    }
                  }}
                }
              },
              "Certificate": {
                "type": "object", "required": ["serial", "kind", "subject", "environments", "notAfter", "createdAt", "certificatePEM"],
                "properties": {
                  "serial": {"type": "string"}, "kind": {"type": "string", "enum": ["authority", "server", "provider", "device"]},
                  "subject": {"type": "string"}, "teamID": {"type": "string"}, "bundleID": {"type": "string"}, "deviceID": {"type": "string"},
                  "environments": {"type": "array", "items": {"type": "string", "enum": ["production", "sandbox"]}},
                  "notAfter": {"type": "string", "format": "date-time"}, "createdAt": {"type": "string", "format": "date-time"},
                  "revokedAt": {"type": "string", "format": "date-time"}, "certificatePEM": {"type": "string"}
                }
              },
              "Revoked": {"type": "object", "required": ["revoked"], "properties": {"revoked": {"type": "string"}}},
              "InboxEntry": {
                "type": "object",
                "required": ["sequence", "receivedAt", "kind", "interface", "environment", "apnsID", "headers", "payloadSize", "outcome"],
                "properties": {
                  "sequence": {"type": "integer", "minimum": 1},
                  "kind": {"type": "string", "enum": ["notification", "broadcast", "channel", "other"], "description": "what the request was: a notification to a device token, a broadcast on a channel, a channel management request, another request"},
                  "receivedAt": {"type": "string", "format": "date-time"},
                  "interface": {"type": "string", "enum": ["http2", "binary"]},
                  "environment": {"type": "string", "enum": ["production", "sandbox"]},
                  "apnsID": {"type": "string"},
                  "apnsUniqueID": {"type": "string", "description": "apns-unique-id, sandbox HTTP/2 notifications only"},
                  "token": {"type": "string"},
                  "topic": {"type": "string"},
                  "provider": {"type": "string", "description": "certificate <serial> or key <key id>"},
                  "teamID": {"type": "string"},
                  "connection": {"type": "string", "description": "the provider connection's peer address"},
                  "device": {"type": "string", "description": "the id (hex) of the device the token is for, when it is one of this server's"},
                  "headers": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "value"], "properties": {"name": {"type": "string"}, "value": {"type": "string"}}}
                  },
                  "payload": {"type": "string", "description": "the payload as text, when it is UTF-8"},
                  "payloadSize": {"type": "integer", "minimum": 0},
                  "fault": {"type": "string", "description": "the fault rule that acted on it"},
                  "node": {"type": "string", "description": "the node that received it, with several nodes"},
                  "outcome": {
                    "type": "object", "required": ["accepted"],
                    "properties": {"accepted": {"type": "boolean"}, "status": {"type": "integer"}, "reason": {"type": "string"}}
                  }
                }
              },
              "InboxPage": {
                "type": "object", "required": ["entries", "more", "last"],
                "properties": {
                  "entries": {"type": "array", "items": {"$ref": "#/components/schemas/InboxEntry"}},
                  "more": {"type": "boolean"},
                  "last": {"type": "integer", "minimum": 0}
                }
              },
              "Event": {
                "type": "object", "required": ["event", "at"],
                "properties": {
                  "event": {"type": "string", "enum": ["accepted", "stored", "replaced", "coalesced", "delivered", "acknowledged", "expired", "throttled", "rejected", "discarded", "faultInjected"]},
                  "at": {"type": "string", "format": "date-time"},
                  "detail": {"type": "string"}
                }
              },
              "Timeline": {
                "type": "object", "required": ["apnsID", "received", "events"],
                "properties": {
                  "apnsID": {"type": "string"},
                  "apnsUniqueID": {"type": "string", "description": "when looked up by its apns-unique-id"},
                  "app": {"type": "string", "description": "the app (bundle id) whose notification it is; absent when the id names no app's (requests no team was authenticated for, or to a topic that was not the provider's)"},
                  "received": {"type": "array", "items": {"$ref": "#/components/schemas/InboxEntry"}},
                  "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}
                }
              },
              "FaultRule": {
                "type": "object", "required": ["id", "match", "action", "hits", "createdAt"],
                "properties": {
                  "id": {"type": "string"},
                  "match": {"$ref": "#/components/schemas/FaultMatch"},
                  "action": {"type": "string", "enum": ["reject", "delay", "close"]},
                  "reason": {"type": "string"},
                  "timestamp": {"type": "string", "format": "date-time"},
                  "binaryStatus": {"type": "integer"},
                  "milliseconds": {"type": "integer"},
                  "remaining": {"type": "integer"},
                  "until": {"type": "string", "format": "date-time"},
                  "hits": {"type": "integer", "minimum": 0},
                  "createdAt": {"type": "string", "format": "date-time"}
                }
              },
              "FaultMatch": {
                "type": "object",
                "properties": {
                  "token": {"type": "string", "nullable": true, "pattern": "^([0-9a-fA-F]{2})+$"}, "topic": {"type": "string", "nullable": true}, "team": {"type": "string", "nullable": true}, "keyID": {"type": "string", "nullable": true},
                  "certificateSerial": {"type": "string", "nullable": true}, "interface": {"type": "string", "nullable": true, "enum": [null, "http2", "binary"]},
                  "environment": {"type": "string", "nullable": true, "enum": [null, "production", "sandbox"]}
                }
              },
              "NewFaultRule": {
                "type": "object", "required": ["action"],
                "description": "null is as if a field were not given",
                "oneOf": [
                  {"properties": {"action": {"enum": ["reject"]}, "reason": {"type": "string"}}, "required": ["action", "reason"]},
                  {"properties": {"action": {"enum": ["delay"]}, "milliseconds": {"type": "integer"}}, "required": ["action", "milliseconds"]},
                  {"properties": {"action": {"enum": ["close"]}}, "required": ["action"]}
                ],
                "properties": {
                  "match": {"allOf": [{"$ref": "#/components/schemas/FaultMatch"}], "nullable": true},
                  "action": {"type": "string", "enum": ["reject", "delay", "close"]},
                  "reason": {"type": "string", "nullable": true, "enum": [null, "BadCollapseId", "BadDeviceToken", "BadExpirationDate", "BadMessageId", "BadPriority", "BadTopic", "DeviceTokenNotForTopic", "DuplicateHeaders", "InvalidPushType", "IdleTimeout", "MissingDeviceToken", "MissingTopic", "PayloadEmpty", "TopicDisallowed", "BadCertificate", "BadCertificateEnvironment", "ExpiredProviderToken", "Forbidden", "InvalidProviderToken", "MissingProviderToken", "BadPath", "MethodNotAllowed", "Unregistered", "PayloadTooLarge", "TooManyProviderTokenUpdates", "TooManyRequests", "InternalServerError", "ServiceUnavailable", "Shutdown"], "description": "a reason of docs/protocol.md (reject; close: default Shutdown)"},
                  "timestamp": {"type": "number", "nullable": true, "minimum": 0, "maximum": 253402300799, "description": "Unregistered's time, seconds since 1970 (an ISO 8601 time is taken too)"},
                  "binaryStatus": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 255},
                  "milliseconds": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 60000},
                  "count": {"type": "integer", "nullable": true, "minimum": 1, "maximum": 1000000000},
                  "seconds": {"type": "number", "nullable": true, "minimum": 1, "maximum": 31536000}
                }
              },
              "ServerStatus": {
                "type": "object", "required": ["listeners", "payloadLimits", "devicesOnline", "connections", "notificationsHeld", "inbox", "deliveryLogBacklog"],
                "properties": {
                  "listeners": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "description": "the port of each listener (http2.production, ..., admin)"},
                  "payloadLimits": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "description": "the HTTP/2 API's payload limits in bytes: http2, and http2VoIP for VoIP topics"},
                  "devicesOnline": {"type": "integer", "minimum": 0},
                  "notificationsHeld": {"type": "integer", "minimum": 0},
                  "connections": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
                  "inbox": {
                    "type": "object", "required": ["entries", "capacity"],
                    "properties": {"entries": {"type": "integer", "minimum": 0}, "capacity": {"type": "integer", "minimum": 0}}
                  },
                  "deliveryLogBacklog": {"type": "integer", "minimum": 0}
                }
              },
              "ConsolePush": {
                "type": "object", "required": ["environment", "team", "topic", "token", "payload"],
                "properties": {
                  "environment": {"type": "string", "enum": ["production", "sandbox"]}, "team": {"type": "string"}, "topic": {"type": "string", "minLength": 1},
                  "token": {"type": "string", "pattern": "^([0-9a-fA-F]{2})+$", "description": "device token, hex"}, "payload": {"type": "string", "description": "sent as it is"},
                  "pushType": {"type": "string"}, "priority": {"type": "integer", "enum": [10, 5, 1]},
                  "expiration": {"type": "integer", "minimum": 0, "maximum": 253402300799, "description": "seconds since 1970; 0: now or never"},
                  "collapseID": {"type": "string"}, "apnsID": {"type": "string", "format": "uuid", "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"}
                }
              },
              "ConsolePushAnswer": {
                "type": "object", "required": ["status", "apnsID"],
                "properties": {
                  "status": {"type": "integer"}, "apnsID": {"type": "string"}, "apnsUniqueID": {"type": "string"}, "reason": {"type": "string"},
                  "timestamp": {"type": "string", "format": "date-time"},
                  "fault": {"type": "string", "description": "the fault rule that answered it, when one did"}
                }
              },
              "ConsoleSession": {
                "type": "object", "required": ["csrf", "expiresAt"],
                "properties": {"csrf": {"type": "string", "description": "X-CSRF-Token for every request that changes something"}, "expiresAt": {"type": "string", "format": "date-time"}}
              }
            }
          },
          "security": [{"adminToken": []}],
          "paths": {
            "/health/live": {
              "get": {
                "summary": "The process answers", "security": [],
                "responses": {"200": {"description": "live", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}}}
              }
            },
            "/health/ready": {
              "get": {
                "summary": "Every listener is bound and the store answers", "security": [],
                "responses": {
                  "200": {"description": "ready", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}}},
                  "503": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/metrics": {
              "get": {
                "summary": "Prometheus metrics, in the text exposition format", "security": [],
                "responses": {"200": {"description": "the metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}}
              }
            },
            "/openapi.json": {
              "get": {"summary": "This document", "security": [], "responses": {"200": {"description": "the OpenAPI document", "content": {"application/json": {}}}}}
            },
            "/v1/inbox": {
              "get": {
                "summary": "The notifications received that match, oldest first",
                "parameters": [
                  {"$ref": "#/components/parameters/topic"}, {"$ref": "#/components/parameters/token"}, {"$ref": "#/components/parameters/apnsID"},
                  {"$ref": "#/components/parameters/team"}, {"$ref": "#/components/parameters/interface"}, {"$ref": "#/components/parameters/kind"}, {"$ref": "#/components/parameters/environment"},
                  {"$ref": "#/components/parameters/outcome"}, {"$ref": "#/components/parameters/since"}, {"$ref": "#/components/parameters/until"},
                  {"$ref": "#/components/parameters/after"}, {"$ref": "#/components/parameters/limit"}
                ],
                "responses": {
                  "200": {"description": "a page of entries", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InboxPage"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              },
              "delete": {
                "summary": "Forget every entry",
                "responses": {
                  "200": {
                    "description": "cleared",
                    "content": {"application/json": {"schema": {"type": "object", "required": ["cleared"], "properties": {"cleared": {"type": "integer", "minimum": 0}}}}}
                  },
                  "401": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/inbox/wait": {
              "get": {
                "summary": "The first entry after 'after' that matches: one received already, or the next one (long poll)",
                "parameters": [
                  {"$ref": "#/components/parameters/topic"}, {"$ref": "#/components/parameters/token"}, {"$ref": "#/components/parameters/apnsID"},
                  {"$ref": "#/components/parameters/team"}, {"$ref": "#/components/parameters/interface"}, {"$ref": "#/components/parameters/kind"}, {"$ref": "#/components/parameters/environment"},
                  {"$ref": "#/components/parameters/outcome"}, {"$ref": "#/components/parameters/since"}, {"$ref": "#/components/parameters/until"},
                  {"$ref": "#/components/parameters/after"},
                  {"name": "timeout", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 300, "default": 30}, "description": "seconds"}
                ],
                "responses": {
                  "200": {"description": "the entry", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InboxEntry"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/notifications/{apnsID}": {
              "get": {
                "summary": "A notification's delivery log, and how it came in, by its apns-id or its apns-unique-id, of one app",
                "description": "Providers choose apns-ids, so apps of two teams may use the same one: each app's notification has its own timeline. Without app, the one app the id names; 409 when it names several.",
                "parameters": [
                  {"name": "apnsID", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid", "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"}},
                  {"name": "app", "in": "query", "description": "the app (bundle id) whose notification it is", "schema": {"type": "string"}}
                ],
                "responses": {
                  "200": {"description": "its timeline", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Timeline"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"},
                  "409": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/tokens/{token}/notifications": {
              "get": {
                "summary": "A device token's recent notifications with their timelines, newest first",
                "parameters": [
                  {"name": "token", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2})+$"}},
                  {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}
                ],
                "responses": {
                  "200": {
                    "description": "its notifications",
                    "content": {"application/json": {"schema": {
                      "type": "object", "required": ["token", "notifications"],
                      "properties": {"token": {"type": "string"}, "notifications": {"type": "array", "items": {"$ref": "#/components/schemas/Timeline"}}}
                    }}}
                  },
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/faults": {
              "get": {
                "summary": "The fault rules in force",
                "responses": {
                  "200": {
                    "description": "the rules",
                    "content": {"application/json": {"schema": {
                      "type": "object", "required": ["faults"],
                      "properties": {"faults": {"type": "array", "items": {"$ref": "#/components/schemas/FaultRule"}}}
                    }}}
                  },
                  "401": {"$ref": "#/components/responses/Error"}
                }
              },
              "post": {
                "summary": "Add a fault rule",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewFaultRule"}}}},
                "responses": {
                  "201": {"description": "the rule", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FaultRule"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "409": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/faults/{id}": {
              "delete": {
                "summary": "Remove a fault rule",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {
                  "200": {
                    "description": "removed",
                    "content": {"application/json": {"schema": {"type": "object", "required": ["removed"], "properties": {"removed": {"type": "string"}}}}}
                  },
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/tokens/{token}/unregister": {
              "post": {
                "summary": "Mark a token unregistered at a time, without its device: pushes get 410 with that time, and a feedback entry",
                "parameters": [{"name": "token", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2})+$"}}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                  "type": "object", "required": ["environment", "topic"],
                  "properties": {
                    "environment": {"type": "string", "enum": ["production", "sandbox"]},
                    "topic": {"type": "string"},
                    "at": {"type": "number", "nullable": true, "minimum": 0, "maximum": 253402300799, "description": "seconds since 1970 (an ISO 8601 time is taken too); default now"}
                  }
                }}}},
                "responses": {
                  "200": {
                    "description": "marked",
                    "content": {"application/json": {"schema": {
                      "type": "object", "required": ["token", "topic", "environment", "unregisteredAt"],
                      "properties": {
                        "token": {"type": "string"}, "topic": {"type": "string"}, "environment": {"type": "string"},
                        "unregisteredAt": {"type": "string", "format": "date-time"}
                      }
                    }}}
                  },
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/apps/{bundleID}/virtual-tokens": {
              "parameters": [{"name": "bundleID", "in": "path", "required": true, "schema": {"type": "string"}}],
              "post": {
                "summary": "Register tokens Courier did not issue (a team's own Apple tokens) as virtual devices of the app, online; one registered already keeps its state",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                  "type": "object", "required": ["environment", "tokens"],
                  "properties": {
                    "environment": {"type": "string", "enum": ["production", "sandbox"]},
                    "tokens": {"type": "array", "minItems": 1, "maxItems": 100000, "items": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}}
                  }
                }}}},
                "responses": {
                  "201": {"description": "registered", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["bundleID", "environment", "added", "existing", "total"],
                    "properties": {
                      "bundleID": {"type": "string"}, "environment": {"type": "string"}, "added": {"type": "integer"},
                      "existing": {"type": "integer", "description": "tokens of the list registered already"}, "total": {"type": "integer"}
                    }
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"},
                  "413": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"}
                }
              },
              "get": {
                "summary": "The app's virtual tokens in an environment, in token order, a page at a time",
                "parameters": [
                  {"name": "environment", "in": "query", "required": true, "schema": {"type": "string", "enum": ["production", "sandbox"]}},
                  {"name": "after", "in": "query", "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2})+$"}, "description": "the token the page starts after: the last page's next"},
                  {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}}
                ],
                "responses": {
                  "200": {"description": "a page", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["bundleID", "environment", "total", "tokens"],
                    "properties": {
                      "bundleID": {"type": "string"}, "environment": {"type": "string"}, "total": {"type": "integer"},
                      "tokens": {"type": "array", "items": {"$ref": "#/components/schemas/VirtualToken"}},
                      "next": {"type": "string", "nullable": true, "description": "after for the next page; absent on the last"}
                    }
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}
                }
              },
              "delete": {
                "summary": "Remove every virtual token of the app in an environment; what was held for them is dropped",
                "parameters": [{"name": "environment", "in": "query", "required": true, "schema": {"type": "string", "enum": ["production", "sandbox"]}}],
                "responses": {
                  "200": {"description": "removed", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["removed"], "properties": {"removed": {"type": "integer"}}
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/apps/{bundleID}/virtual-tokens/{token}": {
              "parameters": [
                {"name": "bundleID", "in": "path", "required": true, "schema": {"type": "string"}},
                {"name": "token", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2})+$"}}
              ],
              "patch": {
                "summary": "Set a virtual device offline (pushes held) or online (what is held is taken), uninstall it at a time (410 and a feedback entry) or install it again",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                  "type": "object", "required": ["environment"],
                  "properties": {
                    "environment": {"type": "string", "enum": ["production", "sandbox"]},
                    "online": {"type": "boolean"},
                    "uninstalledAt": {"type": "number", "nullable": true, "minimum": 0, "maximum": 253402300799, "description": "uninstalled at this time: seconds since 1970 (an ISO 8601 time, or now, is taken too); null: installed again; absent: unchanged"}
                  }
                }}}},
                "responses": {
                  "200": {"description": "the token now", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/VirtualToken"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"}
                }
              },
              "delete": {
                "summary": "Remove one virtual token; what was held for it is dropped",
                "parameters": [{"name": "environment", "in": "query", "required": true, "schema": {"type": "string", "enum": ["production", "sandbox"]}}],
                "responses": {
                  "200": {"description": "removed", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["removed"], "properties": {"removed": {"type": "integer"}}
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/devices": {
              "post": {
                "summary": "Activate a device: its identity (certificate, key, CA, identity.json), the key in this answer only",
                "responses": {
                  "201": {"description": "the identity", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["deviceID", "certificatePEM", "keyPEM", "caPEM", "identity"],
                    "properties": {
                      "deviceID": {"type": "string"}, "certificatePEM": {"type": "string"}, "keyPEM": {"type": "string"}, "caPEM": {"type": "string"},
                      "identity": {"type": "object", "required": ["deviceID", "generation", "host", "productionPort", "sandboxPort", "tokens"]}
                    }
                  }}}},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              },
              "get": {
                "summary": "Devices connected now (to every node, with several), the longest connected first, with their app registrations in that environment",
                "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}}],
                "responses": {
                  "200": {
                    "description": "devices",
                    "content": {"application/json": {"schema": {
                      "type": "object", "required": ["online", "devices"],
                      "properties": {
                        "online": {"type": "integer", "minimum": 0},
                        "devices": {"type": "array", "items": {
                          "type": "object", "required": ["deviceID", "environment", "connectedAt", "registrations"],
                          "properties": {
                            "deviceID": {"type": "string"}, "environment": {"type": "string", "enum": ["production", "sandbox"]},
                            "node": {"type": "string"}, "connectedAt": {"type": "string", "format": "date-time"},
                            "registrations": {"type": "array", "items": {
                              "type": "object", "required": ["bundleID", "token", "active", "registeredAt"],
                              "properties": {
                                "bundleID": {"type": "string"}, "token": {"type": "string"}, "active": {"type": "boolean"},
                                "registeredAt": {"type": "string", "format": "date-time"}, "unregisteredAt": {"type": "string", "format": "date-time"}
                              }
                            }}
                          }
                        }}
                      }
                    }}}
                  },
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/connections": {
              "get": {
                "summary": "Provider connections open now (binary and HTTP/2), the oldest first, with their provider and the notifications they sent",
                "parameters": [{"name": "interface", "in": "query", "schema": {"type": "string", "enum": ["http2", "binary"]}}],
                "responses": {
                  "200": {
                    "description": "connections",
                    "content": {"application/json": {"schema": {
                      "type": "object", "required": ["connections"],
                      "properties": {
                        "connections": {"type": "array", "items": {
                          "type": "object", "required": ["interface", "environment", "since", "requests"],
                          "properties": {
                            "interface": {"type": "string", "enum": ["http2", "binary"]},
                            "environment": {"type": "string", "enum": ["production", "sandbox"]},
                            "provider": {"type": "string"}, "teamID": {"type": "string"}, "address": {"type": "string"},
                            "since": {"type": "string", "format": "date-time"}, "requests": {"type": "integer", "minimum": 0}
                          }
                        }}
                      }
                    }}}
                  },
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/teams": {
              "get": {
                "summary": "Every team with its apps and auth keys (never a key's .p8)",
                "responses": {
                  "200": {"description": "teams", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["teams"], "properties": {"teams": {"type": "array", "items": {"$ref": "#/components/schemas/Team"}}}
                  }}}},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              },
              "post": {
                "summary": "Create a team",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                  "type": "object", "required": ["id", "name"],
                  "properties": {"id": {"type": "string", "pattern": "^[A-Z0-9]{10}$", "description": "ten characters A-Z, 0-9"}, "name": {"type": "string", "minLength": 1}}
                }}}},
                "responses": {
                  "201": {"description": "the team", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Team"}}}},
                  "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                  "409": {"$ref": "#/components/responses/Error"}, "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/apps": {
              "post": {
                "summary": "Create an app of a team, with its topics",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                  "type": "object", "required": ["bundleID", "teamID"],
                  "properties": {
                    "bundleID": {"type": "string", "pattern": "^[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$", "maxLength": 155},
                    "teamID": {"type": "string", "pattern": "^[A-Z0-9]{10}$"},
                    "topicKinds": {
                      "type": "array", "nullable": true, "minItems": 1, "description": "default (absent or null) all",
                      "items": {"type": "string", "enum": ["app", "voip", "complication", "fileprovider", "location", "liveactivity", "pushtotalk", "widgets", "controls"]}
                    }
                  }
                }}}},
                "responses": {
                  "201": {"description": "the app", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/App"}}}},
                  "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/teams/{teamID}/keys": {
              "post": {
                "summary": "Create an auth key for the team (without p8: its .p8 is in this answer only), or import one the team has (keyID and p8); environments and bundleIDs scope it",
                "parameters": [{"name": "teamID", "in": "path", "required": true, "schema": {"type": "string"}}],
                "requestBody": {"required": false, "content": {"application/json": {"schema": {
                  "type": "object",
                  "properties": {
                    "keyID": {"type": "string", "pattern": "^[A-Z0-9]{10}$", "description": "with p8 only"},
                    "p8": {"type": "string", "description": "the AuthKey_<KEYID>.p8 file's text (PKCS#8 PEM, P-256)"},
                    "environments": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": ["production", "sandbox"]}, "description": "default both"},
                    "bundleIDs": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "a topic-specific key: apps of the team it may push to; default a team-scoped key"}
                  }
                }}}},
                "responses": {
                  "201": {"description": "the key: with its .p8 and file name when Courier made it", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["keyID", "teamID", "createdAt", "environments"],
                    "properties": {
                      "keyID": {"type": "string"}, "teamID": {"type": "string"}, "fileName": {"type": "string"}, "p8": {"type": "string"},
                      "createdAt": {"type": "string", "format": "date-time"},
                      "environments": {"type": "array", "items": {"type": "string", "enum": ["production", "sandbox"]}},
                      "bundleIDs": {"type": "array", "items": {"type": "string"}}
                    }
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/keys/{keyID}/revoke": {
              "post": {
                "summary": "Revoke an auth key: its tokens are refused and its connections closed",
                "parameters": [{"name": "keyID", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {
                  "200": {"description": "revoked", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Revoked"}}}},
                  "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
                  "409": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/certificates": {
              "get": {
                "summary": "The certificates Courier issued (without private keys)",
                "parameters": [{"name": "kind", "in": "query", "schema": {"type": "string", "enum": ["authority", "server", "provider", "device"]}}],
                "responses": {
                  "200": {"description": "certificates", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["certificates"],
                    "properties": {"certificates": {"type": "array", "items": {"$ref": "#/components/schemas/Certificate"}}}
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/apps/{bundleID}/certificates": {
              "post": {
                "summary": "Issue a provider certificate for the app: its private key is in this answer only",
                "parameters": [{"name": "bundleID", "in": "path", "required": true, "schema": {"type": "string"}}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                  "type": "object",
                  "properties": {
                    "environments": {
                      "type": "array", "nullable": true, "minItems": 1, "description": "default (absent or null) both",
                      "items": {"type": "string", "enum": ["production", "sandbox"]}
                    },
                    "topicsLayout": {
                      "type": "string", "nullable": true, "enum": [null, "apple", "plain", "uid-only"],
                      "description": "apple (default): Apple's topics extension; plain: a SEQUENCE of strings; uid-only: no topics extension, the bundle id is the only topic"
                    }
                  }
                }}}},
                "responses": {
                  "201": {"description": "the certificate and its key", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["certificate", "certificatePEM", "keyPEM"],
                    "properties": {
                      "certificate": {"$ref": "#/components/schemas/Certificate"}, "certificatePEM": {"type": "string"}, "keyPEM": {"type": "string"}
                    }
                  }}}},
                  "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"}, "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/certificates/{serial}/revoke": {
              "post": {
                "summary": "Revoke a certificate: its handshakes fail and its connections close",
                "parameters": [{"name": "serial", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^:*[0-9a-fA-F][0-9a-fA-F:]*$"}}],
                "responses": {
                  "200": {"description": "revoked", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Revoked"}}}},
                  "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
                  "409": {"$ref": "#/components/responses/Error"}, "422": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/inbox/stream": {
              "get": {
                "summary": "The inbox as server-sent events: each matching entry after 'after' (or Last-Event-ID), then each new one (the console's live tail)",
                "parameters": [
                  {"$ref": "#/components/parameters/topic"}, {"$ref": "#/components/parameters/token"}, {"$ref": "#/components/parameters/apnsID"},
                  {"$ref": "#/components/parameters/team"}, {"$ref": "#/components/parameters/interface"}, {"$ref": "#/components/parameters/kind"}, {"$ref": "#/components/parameters/environment"},
                  {"$ref": "#/components/parameters/outcome"}, {"$ref": "#/components/parameters/since"}, {"$ref": "#/components/parameters/until"},
                  {"$ref": "#/components/parameters/after"}
                ],
                "responses": {
                  "200": {"description": "events named 'entry', each an inbox entry as JSON, its id the sequence", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/push": {
              "post": {
                "summary": "A test push over Courier's own HTTP/2 port, with an auth key the console makes for the team (the console's send form)",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConsolePush"}}}},
                "responses": {
                  "200": {"description": "what the HTTP/2 API answered", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConsolePushAnswer"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "403": {"$ref": "#/components/responses/Error"},
                  "404": {"$ref": "#/components/responses/Error"},
                  "422": {"$ref": "#/components/responses/Error"},
                  "502": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/console/session": {
              "get": {
                "summary": "The console's session, named by its cookie", "security": [],
                "responses": {
                  "200": {"description": "signed in", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConsoleSession"}}}},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              },
              "post": {
                "summary": "Sign the console in with the admin token: sets the session cookie", "security": [],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["token"], "properties": {"token": {"type": "string"}}}}}},
                "responses": {
                  "201": {"description": "signed in", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConsoleSession"}}}},
                  "400": {"$ref": "#/components/responses/Error"},
                  "401": {"$ref": "#/components/responses/Error"},
                  "415": {"$ref": "#/components/responses/Error"}
                }
              },
              "delete": {
                "summary": "Sign out (the session cookie and X-CSRF-Token)", "security": [],
                "responses": {
                  "200": {"description": "signed out", "content": {"application/json": {"schema": {"type": "object", "required": ["signedOut"], "properties": {"signedOut": {"type": "boolean"}}}}}},
                  "401": {"$ref": "#/components/responses/Error"},
                  "403": {"$ref": "#/components/responses/Error"}
                }
              }
            },
            "/v1/status": {
              "get": {
                "summary": "Devices online, open connections, the inbox and the delivery log's backlog",
                "responses": {
                  "200": {"description": "status", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ServerStatus"}}}},
                  "401": {"$ref": "#/components/responses/Error"}
                }
              }
            }
          }
        }
        """#
}
