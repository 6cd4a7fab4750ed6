"""Transport: the websocket server, its HTTP routes, and one connection driver shared by the
native protocol and Twilio Media Streams. Depends on the call layer; nothing below imports it."""
