# Seed 002: a build of fused_adam killed while it held torch's lock.
d="$T/torch_extensions/py311_cu121/fused_adam"
mkdir -p "$d"
printf 'ninja_required_version = 1.3\n' > "$d/build.ninja"
: > "$d/lock"
touch -d '3 hours ago' "$d/lock"
