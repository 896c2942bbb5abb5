// Anchor for the shared precompiled header (torch, OpenCV core, fmt).
