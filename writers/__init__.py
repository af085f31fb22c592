"""Writers of shuffle files and datasets: sort buffer, regions, commit."""
