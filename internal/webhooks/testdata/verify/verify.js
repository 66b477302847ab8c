// Reads one JSON object a line from stdin ({secret, id, timestamp,
// signature, body}) and writes "ok" or "rejected: <why>" a line, as the
// Standard Webhooks library decides.
const { Webhook } = require("standardwebhooks");
const readline = require("node:readline");

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const m = JSON.parse(line);
  try {
    new Webhook(m.secret).verify(m.body, {
      "webhook-id": m.id,
      "webhook-timestamp": m.timestamp,
      "webhook-signature": m.signature,
    });
    console.log("ok");
  } catch (e) {
    console.log("rejected: " + String(e.message || e).replace(/\n/g, " "));
  }
});
