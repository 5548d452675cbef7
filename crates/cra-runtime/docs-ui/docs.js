// Starts Swagger UI (vendored, vendor/VENDORED) on this server's own API description,
// `/openapi.json`. A file of its own, since the page's policy runs no inline script.
window.addEventListener("DOMContentLoaded", () => {
  window.ui = window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
