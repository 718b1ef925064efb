// Vite serves (dev) or previews (the built dist/) the app and forwards the
// API to chatd, so the browser talks to one origin: no CORS needed.
//   CHATD_URL  where chatd listens (default http://127.0.0.1:3000)
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

const target = process.env.CHATD_URL || 'http://127.0.0.1:3000';
const proxy = {
  '/api': { target, changeOrigin: true },
};

export default defineConfig({
  plugins: [react()],
  server: { proxy },
  preview: { proxy },
});
