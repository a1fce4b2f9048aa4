"""The adapters over HTTP: the server, the perimeter, the routes, the WebSocket, the API's actions
and the MCP route. They translate a request and call a service; nothing below imports them."""
